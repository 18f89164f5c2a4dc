// Primitives other targets have copies of (monotonic clock, spinlock, anonymous mappings,
// the error fill, the /proc/self/maps reader in alloc_support.c), kept together so that a
// shared target can replace them in one place.
#ifndef CPERFALLOC_ALLOC_SUPPORT_H
#define CPERFALLOC_ALLOC_SUPPORT_H

#include "alloc_internal.h"

static inline uint64_t monotonicNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void *mapBytes(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static inline size_t pageRound(size_t bytes) {
  size_t page = 4096;
  return (bytes + page - 1) & ~(page - 1);
}

// A spinlock rather than a pthread mutex: uncontended it is one atomic exchange, and
// the atfork handlers can take and drop all of them without any glibc state.
typedef _Atomic uint32_t SpinLock;

static inline void spinLock(SpinLock *lock) {
  unsigned spins = 0;
  while (atomic_exchange_explicit(lock, 1, memory_order_acquire)) {
    while (atomic_load_explicit(lock, memory_order_relaxed)) {
      if (++spins > 64) sched_yield();
      else __builtin_ia32_pause();
    }
  }
}

static inline void spinUnlock(SpinLock *lock) { atomic_store_explicit(lock, 0, memory_order_release); }

static inline int32_t fail(CPerfAlloc_Error *error, int32_t code, const char *call, int sysErrno) {
  if (error) {
    error->code = code;
    error->sysErrno = sysErrno;
    error->call = call;
  }
  return code;
}

// In alloc_support.c: sets t_stackLo and t_stackHi (alloc_internal.h) for `sp`.
ALLOC_HIDDEN void lookUpStackBounds(uintptr_t sp);

#endif
