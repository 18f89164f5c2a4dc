// Reserved addresses (CPerfAlloc_reserveAddresses) and watched frees
// (CPerfAlloc_watchFrees): the leaks instrument's controls; leak_support.h has the hooks' side.
#include "leak_support.h"
#include "next_allocator.h"

#include "thread_table.h"

ALLOC_HIDDEN const uint64_t *_Atomic g_reserved;
ALLOC_HIDDEN _Atomic uint64_t g_reservedCount;
ALLOC_HIDDEN uint64_t g_reservedLo, g_reservedHi;
static uint64_t *g_reservedStorage;
static size_t g_reservedStorageBytes;
ALLOC_HIDDEN void **g_held;
ALLOC_HIDDEN _Atomic uint64_t g_heldCount;
ALLOC_HIDDEN _Atomic uint64_t g_heldBytes;
ALLOC_HIDDEN _Atomic uint64_t g_notAvoided;

void CPerfAlloc_reserveAddresses(const uint64_t *addresses, uint64_t count) {
  atomic_store(&g_fastPath, FAST_NONE);
  atomic_store_explicit(&g_reservedCount, 0, memory_order_release);
  if (!count || !addresses) return;
  if (!g_held) {
    g_held = mapBytes(HELD_CAPACITY * sizeof(void *));
    if (!g_held) return;
  }
  size_t bytes = pageRound(count * sizeof(uint64_t));
  if (bytes > g_reservedStorageBytes) {
    uint64_t *storage = mapBytes(bytes);
    if (!storage) return;
    g_reservedStorage = storage;  // the old one stays mapped (see above)
    g_reservedStorageBytes = bytes;
  }
  memcpy(g_reservedStorage, addresses, count * sizeof(uint64_t));
  g_reservedLo = g_reservedStorage[0];
  g_reservedHi = g_reservedStorage[count - 1];
  atomic_store_explicit(&g_heldCount, 0, memory_order_relaxed);
  atomic_store_explicit(&g_heldBytes, 0, memory_order_relaxed);
  atomic_store_explicit(&g_notAvoided, 0, memory_order_relaxed);
  atomic_store_explicit(&g_reserved, g_reservedStorage, memory_order_relaxed);
  atomic_store_explicit(&g_reservedCount, count, memory_order_release);
}

void CPerfAlloc_releaseReservedAddresses(CPerfAlloc_Reserved *out) {
  CPerfAlloc_Reserved r = {
      .addresses = atomic_exchange_explicit(&g_reservedCount, 0, memory_order_acq_rel),
      .heldBytes = atomic_load_explicit(&g_heldBytes, memory_order_relaxed),
      .notAvoided = atomic_load_explicit(&g_notAvoided, memory_order_relaxed),
  };
  uint64_t held = atomic_exchange_explicit(&g_heldCount, 0, memory_order_relaxed);
  if (held > HELD_CAPACITY) held = HELD_CAPACITY;
  r.heldBlocks = held;
  for (uint64_t i = 0; i < held; i++) {
    if (g_held[i]) NEXT(free)(g_held[i]);
    g_held[i] = NULL;
  }
  atomic_store_explicit(&g_heldBytes, 0, memory_order_relaxed);
  atomic_store_explicit(&g_notAvoided, 0, memory_order_relaxed);
  if (out) *out = r;
}

ALLOC_HIDDEN TLS const CPerfAlloc_Block *t_keptListing;  // the keeping thread's, else NULL
static TLS uint64_t t_keptListingCount;
static uint64_t *g_kept;           // written by the keeping thread only
static uint64_t g_keptCount;       // words of g_kept used, records' headers included
static uint64_t g_keptDropped;     // listed blocks freed that did not fit
static _Atomic int32_t g_keeping;  // a thread keeps copies (its scan reads them)

ALLOC_HIDDEN uint64_t *g_watchLog;
static _Atomic int32_t g_watchWanted;  // set before the listing, the log starts at it
ALLOC_HIDDEN _Atomic int32_t g_watching;
ALLOC_HIDDEN _Atomic uint64_t g_watchCount;

// Under the listing's locks (or right before it): frees from here on are logged.
ALLOC_HIDDEN void startWatchIfWanted(void) {
  if (!atomic_load_explicit(&g_watchWanted, memory_order_relaxed) || !g_watchLog) return;
  atomic_store_explicit(&g_watchCount, 0, memory_order_relaxed);
  atomic_store_explicit(&g_watching, 1, memory_order_release);
}

void CPerfAlloc_watchFrees(void) {
  if (!g_watchLog) {
    g_watchLog = mapBytes(WATCH_CAPACITY * sizeof(uint64_t));
    if (!g_watchLog) return;
  }
  atomic_store_explicit(&g_watching, 0, memory_order_relaxed);
  // Copies of an earlier watch are not this one's.
  t_keptListing = NULL;
  atomic_store_explicit(&g_keeping, 0, memory_order_relaxed);
  atomic_store_explicit(&g_watchWanted, 1, memory_order_release);
}

uint64_t CPerfAlloc_watchedFrees(const uint64_t **addresses, uint64_t *frees) {
  if (addresses) *addresses = g_watchLog;
  uint64_t n = atomic_load_explicit(&g_watching, memory_order_acquire)
                   ? atomic_load_explicit(&g_watchCount, memory_order_acquire)
                   : 0;
  if (frees) *frees = n;
  return n < WATCH_CAPACITY ? n : WATCH_CAPACITY;
}

void CPerfAlloc_endWatchingFrees(void) {
  t_keptListing = NULL;
  atomic_store_explicit(&g_keeping, 0, memory_order_relaxed);
  atomic_store_explicit(&g_watchWanted, 0, memory_order_relaxed);
  atomic_store_explicit(&g_watching, 0, memory_order_release);
}

void CPerfAlloc_keepFreedWords(const CPerfAlloc_Block *listing, uint64_t count) {
  t_keptListing = NULL;
  atomic_store_explicit(&g_keeping, 0, memory_order_relaxed);
  g_keptCount = 0;
  g_keptDropped = 0;
  if (!listing || count == 0) return;
  if (!g_kept) {
    g_kept = mapBytes(KEPT_CAPACITY * sizeof(uint64_t));
    if (!g_kept) return;
  }
  t_keptListingCount = count;
  t_keptListing = listing;
  atomic_store_explicit(&g_keeping, 1, memory_order_relaxed);
}

// In the free hook of the keeping thread, before the allocator's free: a listed block's
// words as they are now, with the position of this free in the watch log (the scan takes a
// copy only of a block's first free since the listing: at a later one, the address holds
// another block). No more than the allocator's usable size is read: the block at the
// address may be a smaller one than the listed block by then.
ALLOC_HIDDEN void keepFreedWords(void *pointer, uint64_t logIndex) {
  const CPerfAlloc_Block *listing = t_keptListing;
  uint64_t address = (uint64_t)(uintptr_t)pointer, lo = 0, hi = t_keptListingCount;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if ((listing[mid].addressWord & KEPT_ADDRESS_MASK) < address)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo >= t_keptListingCount || (listing[lo].addressWord & KEPT_ADDRESS_MASK) != address) return;
  uint64_t bytes = listing[lo].sizeWord & CPerfAlloc_BlockSizeMask;
  uint64_t usable = NEXT(usableSize)(pointer);
  if (usable < bytes) bytes = usable;
  uint64_t words = bytes / 8;
  if (words > KEPT_BLOCK_WORDS) words = KEPT_BLOCK_WORDS;
  if (g_keptCount + words + 3 > KEPT_CAPACITY) {
    g_keptDropped++;
    return;
  }
  uint64_t *record = &g_kept[g_keptCount];
  record[0] = address;
  record[1] = logIndex;
  record[2] = words;
  memcpy(&record[3], pointer, words * 8);
  g_keptCount += words + 3;
}

// Read by the scan's own thread, which the keeping thread started and waits for: no copy is
// being written meanwhile.
uint64_t CPerfAlloc_keptFreedWords(const uint64_t **words, uint64_t *dropped) {
  int keeping = atomic_load_explicit(&g_keeping, memory_order_relaxed) && g_kept;
  if (words) *words = keeping ? g_kept : NULL;
  if (dropped) *dropped = keeping ? g_keptDropped : 0;
  return keeping ? g_keptCount : 0;
}
