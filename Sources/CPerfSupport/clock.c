#include "CPerfSupport.h"
#include "CPerfSupportInline.h"

#include <cpuid.h>
#include <time.h>
#include <x86intrin.h>

bool CPerfSupport_tscIsInvariant(void) {
  unsigned a, b, c, d;
  return __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));
}

// Both clocks at one moment: the TSC is read on either side of the CLOCK_MONOTONIC
// reading, which is read again if something (a preemption) came between them.
static void clock_pair(uint64_t *ns, uint64_t *tsc) {
  for (int tries = 0;; tries++) {
    uint64_t before = __rdtsc();
    uint64_t n = CPerfSupport_monotonicNs();
    uint64_t after = __rdtsc();
    if (after - before < 3000 || tries == 100) {
      *ns = n;
      *tsc = before + (after - before) / 2;
      return;
    }
  }
}

bool CPerfSupport_calibrate(uint64_t *nsPerTsc32, uint64_t *baseNs, uint64_t *baseTsc) {
  uint64_t n0, c0, n1, c1;
  clock_pair(&n0, &c0);
  do clock_pair(&n1, &c1);
  while (n1 - n0 < 2000000);
  if (c1 <= c0) return false;
  *nsPerTsc32 = (uint64_t)((((unsigned __int128)(n1 - n0)) << 32) / (c1 - c0));
  *baseNs = n1;
  *baseTsc = c1;
  return true;
}
