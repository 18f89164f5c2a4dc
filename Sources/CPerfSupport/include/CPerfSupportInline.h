#ifndef CPERFSUPPORTINLINE_H
#define CPERFSUPPORTINLINE_H

// Helpers the recorders' hot paths inline (C only: Swift does not import C atomics).

#include "CPerfSupport.h"

#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

/// CLOCK_MONOTONIC in nanoseconds (vDSO: async-signal-safe).
static inline uint64_t CPerfSupport_monotonicNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/// A spinlock rather than a pthread mutex: uncontended it is one atomic exchange, and
/// atfork handlers can take and drop it without any glibc state.
typedef _Atomic uint32_t CPerfSupport_SpinLock;

static inline void CPerfSupport_spinLock(CPerfSupport_SpinLock *lock) {
  unsigned spins = 0;
  while (atomic_exchange_explicit(lock, 1, memory_order_acquire)) {
    while (atomic_load_explicit(lock, memory_order_relaxed)) {
      if (++spins > 64)
        sched_yield();
      else
        __builtin_ia32_pause();
    }
  }
}

static inline void CPerfSupport_spinUnlock(CPerfSupport_SpinLock *lock) {
  atomic_store_explicit(lock, 0, memory_order_release);
}

/// Anonymous read-write memory, zero-filled, or NULL: the recorders' tables and the scan's
/// buffers, which must not come from malloc (its hooks, or a heap other threads hold locked).
/// `noReserve`: no swap accounting, for tables sized for the worst case and mostly untouched.
static inline void *CPerfSupport_mapAnonymous(uint64_t bytes, bool noReserve) {
  if (bytes == 0) bytes = 1;
  void *p =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (noReserve ? MAP_NORESERVE : 0), -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static inline uint64_t CPerfSupport_pageRound(uint64_t bytes) { return (bytes + 4095) & ~4095ull; }

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/// Maps `bytes` at page-aligned `from` in, writable and zeroed, as writing them would but
/// without the writes (MADV_POPULATE_WRITE; a no-op on a kernel before 5.14).
static inline void CPerfSupport_populate(void *from, uint64_t bytes) {
  if (from && bytes) (void)madvise(from, bytes, MADV_POPULATE_WRITE);
}

/// Fills `error` (if any) and returns `code`.
static inline int32_t CPerfSupport_fail(CPerfSupport_Error *error, int32_t code, const char *call, int sysErrno) {
  if (error) {
    error->code = code;
    error->sysErrno = sysErrno;
    error->call = call;
  }
  return code;
}

#endif
