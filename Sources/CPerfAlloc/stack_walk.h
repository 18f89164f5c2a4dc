// The allocation hooks' stack walk (frame pointers, within the thread's stack bounds) and
// the per-thread cache of recent walks, static inline for recordAllocWithStack.
#ifndef CPERFALLOC_STACK_WALK_H
#define CPERFALLOC_STACK_WALK_H

#include "alloc_support.h"
#include "stack_table.h"

// MARK: - Stack walking

// `frame` is the hook's frame: frame[0] the caller's frame pointer, frame[1] the return
// address into malloc's caller (the public hooks tail-call the recording functions).
// Fills `reads` with the (next, ret) word pairs it read, frame by frame (up to
// STACK_CACHE_FRAMES; *readCount is the number of pairs read, or UINT32_MAX if more),
// each word inverted (STACK_CACHE_WORD), and *hash with the frames' running hash.
#define STACK_CACHE_FRAMES  64
#define STACK_CACHE_ENTRIES 4
// The cache keeps the words it read inverted. A "saved frame pointer" is whatever the
// caller had in rbp, and code built without frame pointers (gcc -O2) keeps data there: a
// heap block's address, which the cache (TLS, a root to the leak scan) would keep naming
// after the program dropped it. Inverted, a user-space address (below 2^47) has bit 47 set
// and names no block; the check compares as cheaply (all ones where equal).
#define STACK_CACHE_WORD(word) (~(uintptr_t)(word))
static inline uint32_t captureStack(uintptr_t *frame, uint64_t *out, int maxDepth, uintptr_t (*reads)[2],
                                    uint32_t *readCount, uint64_t *hash) {
  uintptr_t sp = (uintptr_t)frame;
  *readCount = UINT32_MAX;
  *hash = 0;
  if (UNLIKELY(t_stackHi == 0)) lookUpStackBounds(sp);
  uintptr_t hi = t_stackHi;
  if (hi <= 1 || sp < t_stackLo || sp >= hi) return 0;
  uint32_t depth = 0, count = 0;
  uint64_t h = 0;
  uintptr_t fp = sp;
  while ((int)depth < maxDepth) {
    if (fp < sp || fp + 16 > hi || (fp & 7)) break;
    uintptr_t next = ((uintptr_t *)fp)[0];
    uintptr_t ret = ((uintptr_t *)fp)[1];
    if (count < STACK_CACHE_FRAMES) {
      reads[count][0] = STACK_CACHE_WORD(next);
      reads[count][1] = STACK_CACHE_WORD(ret);
    }
    count++;
    if (ret < 4096) break;
    out[depth++] = ret;
    h = stackHashStep(h, ret);
    if (next <= fp) break;
    fp = next;
  }
  *hash = h;
  if (count <= STACK_CACHE_FRAMES) *readCount = count;
  return depth;
}

// Per-thread cache of the last stacks walked. The walk is a function of its start (the
// hook's frame), the thread's stack bounds, maxDepth and the words it reads; an entry
// keeps the words read, so if memory still holds them at the same addresses the walk
// would give the same frames, and the entry's stack id is exact. Checking needs no
// pointer chasing: the addresses are known, so the loads run in parallel.
typedef struct StackCacheEntry {
  uint64_t session;  // g_session when filled; 0 never matches
  uintptr_t start;
  uint32_t stackId;
  uint32_t readCount;
  uintptr_t reads[STACK_CACHE_FRAMES][2];  // (next frame pointer, return address)
} StackCacheEntry;
extern ALLOC_HIDDEN TLS StackCacheEntry t_stackCache[STACK_CACHE_ENTRIES];
extern ALLOC_HIDDEN TLS uint32_t t_stackCacheNext;
extern ALLOC_HIDDEN uint64_t g_session;  // incremented by every start

extern ALLOC_HIDDEN bool g_stackCacheWide;  // AVX2 present: set at every start
ALLOC_HIDDEN bool stackCacheMatchWide(const StackCacheEntry *e, uintptr_t start);

static inline bool stackCacheMatches(const StackCacheEntry *e, uintptr_t start) {
  if (e->session != g_session || e->start != start) return false;
  if (g_stackCacheWide) return stackCacheMatchWide(e, start);
  uintptr_t fp = start;
  uint32_t n = e->readCount;
  // A frame's two words and the entry's pair are 16 bytes each: one compare per frame
  // (the check is most of what a full-stack allocation costs at depth). A live word and
  // its kept inversion XOR to all ones.
  __m128i same = _mm_set1_epi32(-1);
  for (uint32_t k = 0; k < n; k++) {
    __m128i live = _mm_loadu_si128((const __m128i *)fp);
    __m128i kept = _mm_loadu_si128((const __m128i *)e->reads[k]);
    same = _mm_and_si128(same, _mm_xor_si128(live, kept));
    fp = STACK_CACHE_WORD(e->reads[k][0]);
  }
  return _mm_movemask_epi8(_mm_cmpeq_epi8(same, _mm_set1_epi32(-1))) == 0xFFFF;  // SSE2 only
}

// The cached stack id for a walk from `frame`, or 0 with *found false.
static inline uint32_t stackCacheLookUp(uintptr_t *frame, bool *found) {
  uintptr_t start = (uintptr_t)frame;
  uint32_t first = t_stackCacheNext;
  for (uint32_t i = 0; i < STACK_CACHE_ENTRIES; i++) {
    // Newest first: entry (next - 1), (next - 2), ...
    const StackCacheEntry *e = &t_stackCache[(first + STACK_CACHE_ENTRIES - 1 - i) % STACK_CACHE_ENTRIES];
    if (stackCacheMatches(e, start)) {
      *found = true;
      return e->stackId;
    }
  }
  *found = false;
  return 0;
}

static inline void stackCacheStore(uintptr_t *frame, uint32_t stackId, uintptr_t (*reads)[2], uint32_t readCount) {
  if (readCount > STACK_CACHE_FRAMES || stackId == 0) return;
  StackCacheEntry *e = &t_stackCache[t_stackCacheNext % STACK_CACHE_ENTRIES];
  t_stackCacheNext = (t_stackCacheNext + 1) % STACK_CACHE_ENTRIES;
  e->session = g_session;
  e->start = (uintptr_t)frame;
  e->stackId = stackId;
  e->readCount = readCount;
  memcpy(e->reads, reads, (size_t)readCount * sizeof(reads[0]));
}

#endif
