// Dithered sampling periods: each thread's next sample comes after a period drawn uniformly
// from [0.5, 1.5] of the requested one, so a program whose work repeats at (a divisor of)
// the sampling period is not sampled at the same phase of it run after run.
//
// Uniform over exactly one period's width: for work that repeats every period (or every
// period / k), the next sample's phase in it is then uniform whatever the previous one's
// (E[exp(2πi U)] = 0 for U uniform on an interval of length 1), so samples are independent
// draws after a single step. An exponential period (a Poisson process) decorrelates as well,
// but its gaps run from ~0 (which the kernel's 10 µs minimum and back-to-back signals turn
// into cost) to several periods, and its sample count varies as much as a Poisson count;
// the uniform one keeps the gaps within 0.5-1.5 periods.
//
// splitmix64: one add and a mix per draw, state in one word the owner alone writes, so it
// is async-signal-safe (no libc rand, no lock, nothing allocated).
#ifndef SAMPLER_DITHER_H
#define SAMPLER_DITHER_H

#include "sampler_internal.h"

// Set at session start (CPerfSampler_setDither), read by handlers and the ticker.
extern SAMPLER_HIDDEN bool g_dither;

static inline uint64_t dither_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// A generator's first state: distinct per thread and per session (the TSC differs).
static inline uint64_t dither_seed(uint64_t tid, uint64_t salt) {
  return dither_mix((tid << 32) ^ salt ^ __builtin_ia32_rdtsc());
}

/// The next period: uniform in [mean / 2, 3 mean / 2], whose mean is `mean`; `mean` itself
/// when dithering is off.
static inline uint64_t dither_period(uint64_t *state, uint64_t mean) {
  if (!g_dither) return mean;
  *state += 0x9E3779B97F4A7C15ull;
  uint64_t random = dither_mix(*state);
  return mean / 2 + (uint64_t)(((unsigned __int128)random * (mean + 1)) >> 64);
}

#endif
