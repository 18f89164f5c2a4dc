// Primitives other C targets have their own copies of (a monotonic clock, the session error
// fill, SIGPROF forwarding to the previous handler, reading /proc/self/maps), kept together
// here so that one shared target can replace them.
#ifndef CPERFSAMPLER_SUPPORT_H
#define CPERFSAMPLER_SUPPORT_H

#include "sampler_internal.h"

#include <signal.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: async-signal-safe
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void set_error(CPerfSampler_Error *error, int32_t code, const char *call, int err) {
  if (error) {
    error->code = code;
    error->sysErrno = err;
    error->call = call;
  }
}

static inline void chain_to_previous(const struct sigaction *previous, int sig, siginfo_t *info, void *context) {
  // Not one of our timer signals: give it to whoever owned SIGPROF before us. If that
  // was SIG_DFL the signal is swallowed instead of killing the process.
  if (previous->sa_flags & SA_SIGINFO) {
    if (previous->sa_sigaction) previous->sa_sigaction(sig, info, context);
  } else if (previous->sa_handler != SIG_DFL && previous->sa_handler != SIG_IGN) {
    previous->sa_handler(sig);
  }
}

/// The whole of /proc/self/maps, NUL-terminated, in a buffer for free(); NULL if it cannot
/// be read.
SAMPLER_HIDDEN char *read_self_maps(void);

#endif
