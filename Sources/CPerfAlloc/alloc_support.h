// What the allocation recorder adds to CPerfSupport's primitives (the clock, the spinlock,
// the error fill, the maps reader): its anonymous mappings, and the stack bounds its walk
// reads.
#ifndef CPERFALLOC_ALLOC_SUPPORT_H
#define CPERFALLOC_ALLOC_SUPPORT_H

#include "alloc_internal.h"
#include "CPerfSupport.h"

// The tables are sized for the worst case and mostly never touched: no swap accounting.
static inline void *mapBytes(size_t bytes) { return CPerfSupport_mapAnonymous(bytes, true); }

static inline size_t pageRound(size_t bytes) { return (size_t)CPerfSupport_pageRound(bytes); }

// For memory about to be written whole (a table's growth, the stop's listing): its pages in
// one call, since on a VM a fault per page costs more than the writing. Older kernels refuse
// the advice and fault instead.
static inline void populateBytes(void *from, size_t bytes) { CPerfSupport_populate(from, bytes); }

// In alloc_support.c: sets t_stackLo and t_stackHi (alloc_internal.h) for `sp`.
ALLOC_HIDDEN void lookUpStackBounds(uintptr_t sp);

#endif
