// Swift object recognition: whether a malloc comes from swift_allocObject's call sites,
// read off the hook's frame (static inline); swift_objects.c finds the sites at start.
#ifndef CPERFALLOC_SWIFT_OBJECTS_H
#define CPERFALLOC_SWIFT_OBJECTS_H

#include "alloc_internal.h"

// MARK: - Swift object recognition

#define MAX_OBJECT_SITES 16
extern ALLOC_HIDDEN uintptr_t g_slowAllocStart, g_slowAllocLength;
// Zero after the last site; swift_allocObject's own site, the usual one, first.
extern ALLOC_HIDDEN uintptr_t g_objectSites[MAX_OBJECT_SITES + 1];
extern ALLOC_HIDDEN uint32_t g_objectSiteCount;

ALLOC_HIDDEN void lookUpObjectSites(void);

// The hook's frame at `frame` holds callerFrame (the allocating function's saved frame
// pointer) and ret (its return address).
static inline bool isObjectAt(uintptr_t ret, uintptr_t callerFrame, uintptr_t frame) {
  if (LIKELY(ret - g_slowAllocStart >= g_slowAllocLength)) return false;
  // swift_slowAlloc keeps a frame pointer: its saved return address is the site.
  if (callerFrame <= frame || (callerFrame & 7)) return false;
  uintptr_t site = ((uintptr_t *)callerFrame)[1];
  // Most objects come from the first site: it costs one compare, with no count to load.
  for (const uintptr_t *known = g_objectSites; *known; known++) {
    if (*known == site) return true;
  }
  return false;
}

static inline bool isObjectAllocation(uintptr_t *frame) { return isObjectAt(frame[1], frame[0], (uintptr_t)frame); }

#endif
