// The stack walk's per-thread state: the thread's stack bounds (lookUpStackBounds fills
// them) and its cache of recent walks (stack_walk.h), with the session count it checks.
#include "stack_walk.h"

ALLOC_HIDDEN TLS uintptr_t t_stackLo;
ALLOC_HIDDEN TLS uintptr_t t_stackHi;
ALLOC_HIDDEN TLS StackCacheEntry t_stackCache[STACK_CACHE_ENTRIES];
ALLOC_HIDDEN TLS uint32_t t_stackCacheNext;
ALLOC_HIDDEN uint64_t g_session;
