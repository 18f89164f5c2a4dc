// What the leaks instrument asks of the hooks: keeping new blocks off reserved addresses
// and logging frees after a listing (the hooks' checks, static inline; leak_support.c).
#ifndef CPERFALLOC_LEAK_SUPPORT_H
#define CPERFALLOC_LEAK_SUPPORT_H

#include "alloc_support.h"

// MARK: - Reserved addresses (CPerfAlloc_reserveAddresses)
//
// The array is only ever replaced between sessions; an old one is never unmapped, so a
// hook still reading it after a stop reads valid memory.
extern ALLOC_HIDDEN const uint64_t *_Atomic g_reserved;
extern ALLOC_HIDDEN _Atomic uint64_t g_reservedCount;
extern ALLOC_HIDDEN uint64_t g_reservedLo, g_reservedHi;
#define HELD_CAPACITY 65536
extern ALLOC_HIDDEN void **g_held;  // HELD_CAPACITY, mapped with the first reservation
extern ALLOC_HIDDEN _Atomic uint64_t g_heldCount;
extern ALLOC_HIDDEN _Atomic uint64_t g_heldBytes;
extern ALLOC_HIDDEN _Atomic uint64_t g_notAvoided;

// Whether [p, p + size) covers a reserved address (the scanner counts interior pointers).
static inline bool coversReserved(void *pointer, size_t size) {
  uint64_t n = atomic_load_explicit(&g_reservedCount, memory_order_acquire);
  if (LIKELY(n == 0) || !pointer) return false;
  uint64_t p = (uint64_t)(uintptr_t)pointer;
  if (p + size <= g_reservedLo || p > g_reservedHi) return false;
  const uint64_t *a = atomic_load_explicit(&g_reserved, memory_order_relaxed);
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    uint64_t mid = (lo + hi) / 2;
    if (a[mid] < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && a[lo] < p + size;
}

// Keeps `pointer` out of use; false when there is no room (then it is used after all).
static inline bool holdAside(void *pointer, size_t size) {
  uint64_t i = atomic_fetch_add_explicit(&g_heldCount, 1, memory_order_relaxed);
  if (i >= HELD_CAPACITY) {
    atomic_fetch_add_explicit(&g_notAvoided, 1, memory_order_relaxed);
    return false;
  }
  g_held[i] = pointer;
  atomic_fetch_add_explicit(&g_heldBytes, size, memory_order_relaxed);
  return true;
}

// Allocates again with `again` while the block covers a reserved address.
#define AVOID_RESERVED(p, size, again) \
  while (UNLIKELY(coversReserved((p), (size))) && holdAside((p), (size))) (p) = (again)

// MARK: - Frees after a listing (CPerfAlloc_watchFrees)

// 32 MB of address space, touched as it fills: the analysis between a stop and its scan
// frees tens of thousands of blocks, not millions.
#define WATCH_CAPACITY ((uint64_t)1 << 22)
extern ALLOC_HIDDEN uint64_t *g_watchLog;
extern ALLOC_HIDDEN _Atomic int32_t g_watching;
extern ALLOC_HIDDEN _Atomic uint64_t g_watchCount;
#define WATCHING() UNLIKELY(atomic_load_explicit(&g_watching, memory_order_relaxed))

// The words of listed blocks freed while watched by the thread that asked for them
// (CPerfAlloc_keepFreedWords): 32 MB of address space, touched as it fills; at most 64 KiB
// of one block. Only that thread copies, into memory only it writes, from a listing it
// keeps alive: no other thread ever reads the listing or the copies.
#define KEPT_CAPACITY     ((uint64_t)1 << 22)
#define KEPT_BLOCK_WORDS  ((uint64_t)8192)
#define KEPT_ADDRESS_MASK ((1ull << 48) - 1)  // CPerfAlloc_Block.addressWord's address
extern ALLOC_HIDDEN TLS const CPerfAlloc_Block *t_keptListing;
ALLOC_HIDDEN void keepFreedWords(void *pointer, uint64_t logIndex);

static inline void noteFree(void *pointer) {
  uint64_t i = atomic_fetch_add_explicit(&g_watchCount, 1, memory_order_relaxed);
  if (i < WATCH_CAPACITY) g_watchLog[i] = (uint64_t)(uintptr_t)pointer;
  if (UNLIKELY(t_keptListing != NULL)) keepFreedWords(pointer, i);
}

ALLOC_HIDDEN void startWatchIfWanted(void);

#endif
