// The stack walk's per-thread state: the thread's stack bounds (lookUpStackBounds fills
// them) and its cache of recent walks (stack_walk.h), with the session count it checks.
#include "stack_walk.h"

ALLOC_HIDDEN TLS uintptr_t t_stackLo;
ALLOC_HIDDEN TLS uintptr_t t_stackHi;
ALLOC_HIDDEN TLS StackCacheEntry t_stackCache[STACK_CACHE_ENTRIES];
ALLOC_HIDDEN TLS uint32_t t_stackCacheNext;
ALLOC_HIDDEN uint64_t g_session;
ALLOC_HIDDEN bool g_stackCacheWide;

// The entry's pairs are contiguous, so two frames' kept words are one 32-byte load, where the
// live frames still take one load each: 1.5 loads a frame instead of 2, the loop's limit
// (stackCacheMatches' SSE2 loop is the same check).
__attribute__((target("avx2"))) ALLOC_HIDDEN bool stackCacheMatchWide(const StackCacheEntry *e, uintptr_t start) {
  // The kept words are inverted (STACK_CACHE_WORD): a match XORs to all ones.
  uintptr_t fp = start;
  uint32_t n = e->readCount, k = 0;
  __m256i same = _mm256_set1_epi32(-1);
  for (; k + 1 < n; k += 2) {
    __m256i kept = _mm256_loadu_si256((const __m256i *)e->reads[k]);
    __m256i live = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)fp)),
                                           _mm_loadu_si128((const __m128i *)STACK_CACHE_WORD(e->reads[k][0])), 1);
    same = _mm256_and_si256(same, _mm256_xor_si256(live, kept));
    fp = STACK_CACHE_WORD(e->reads[k + 1][0]);
  }
  __m128i folded = _mm_and_si128(_mm256_castsi256_si128(same), _mm256_extracti128_si256(same, 1));
  if (k < n) {
    folded = _mm_and_si128(
        folded, _mm_xor_si128(_mm_loadu_si128((const __m128i *)fp), _mm_loadu_si128((const __m128i *)e->reads[k])));
  }
  return _mm_testc_si128(folded, _mm_set1_epi32(-1));
}
