// What the allocation recorder adds to CPerfSupport's primitives (the clock, the spinlock,
// the error fill, the maps reader): its anonymous mappings, and the stack bounds its walk
// reads.
#ifndef CPERFALLOC_ALLOC_SUPPORT_H
#define CPERFALLOC_ALLOC_SUPPORT_H

#include "alloc_internal.h"
#include "CPerfSupport.h"

static inline void *mapBytes(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static inline size_t pageRound(size_t bytes) {
  size_t page = 4096;
  return (bytes + page - 1) & ~(page - 1);
}

// In alloc_support.c: sets t_stackLo and t_stackHi (alloc_internal.h) for `sp`.
ALLOC_HIDDEN void lookUpStackBounds(uintptr_t sp);

#endif
