#ifndef CPERFCLOCK_H
#define CPERFCLOCK_H

#include <stdbool.h>
#include <stdint.h>

// The TSC as a clock on CLOCK_MONOTONIC's scale, for the recorders' timestamps (the
// sampler's handler and the allocation hooks read the TSC, not clock_gettime).

#ifdef __cplusplus
extern "C" {
#endif

/// Whether the TSC runs at a constant rate in every power state (CPUID 0x80000007, EDX
/// bit 8).
bool CPerfClock_tscIsInvariant(void);

/// Calibrates the TSC against CLOCK_MONOTONIC over two milliseconds (it spins that long):
/// CLOCK_MONOTONIC nanoseconds per TSC tick in 32.32 fixed point, and one moment on both
/// clocks. Returns false if the TSC did not advance.
bool CPerfClock_calibrate(uint64_t *nsPerTsc32, uint64_t *baseNs, uint64_t *baseTsc);

#ifdef __cplusplus
}
#endif

#endif
