// The snapshot's storage and accessors, and the live-block listings taken while a session
// runs (CPerfAlloc_liveBlocksNow) or before it (CPerfAlloc_liveBlocksBeforeSession).
#include "snapshot.h"

#include "leak_support.h"
#include "thread_table.h"
#include "timeline.h"

ALLOC_HIDDEN CPerfAlloc_Block *g_blocks;
ALLOC_HIDDEN uint64_t g_blockCount;
ALLOC_HIDDEN size_t g_blocksBytes;
ALLOC_HIDDEN size_t g_blocksReleased;
ALLOC_HIDDEN bool g_blocksOwned;
ALLOC_HIDDEN CPerfAlloc_Block *g_preBlocks;
ALLOC_HIDDEN uint64_t g_preBlockCount;
ALLOC_HIDDEN size_t g_preBlocksBytes;
ALLOC_HIDDEN CPerfAlloc_Freed *g_freedSnapshot;
ALLOC_HIDDEN uint64_t g_freedCount;
ALLOC_HIDDEN size_t g_freedBytes;
ALLOC_HIDDEN CPerfAlloc_Stats g_stats;
ALLOC_HIDDEN CPerfAlloc_Freed *g_stackTotals;
ALLOC_HIDDEN uint64_t g_stackTotalCount;
ALLOC_HIDDEN size_t g_stackTotalsBytes;

// Copies a freed table's categories into `out` from index f (its lost frees as one entry
// with key UINT64_MAX); returns the next index.
ALLOC_HIDDEN uint64_t snapshotFreed(const FreedTable *t, CPerfAlloc_Freed *out, uint64_t f, uint64_t capacity,
                                    bool stackKeys) {
  for (uint64_t j = 0; out && t->slots && j < FREED_SLOTS + SIZE_CLASS_SLOTS; j++) {
    if (t->slots[j].count == 0 || f >= capacity) continue;
    out[f].key = stackKeys ? t->slots[j].key >> 1 : t->slots[j].key;
    out[f].count = t->slots[j].count;
    out[f].bytes = t->slots[j].bytes;
    f++;
  }
  if (out && t->lost && f < capacity) {
    out[f].key = UINT64_MAX;
    out[f].count = t->lost;
    out[f].bytes = 0;
    f++;
  }
  return f;
}

void CPerfAlloc_stats(CPerfAlloc_Stats *stats) {
  if (stats) *stats = g_stats;
}

const CPerfAlloc_Block *CPerfAlloc_blocks(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  if (count) *count = ok ? g_blockCount : 0;
  return ok ? g_blocks : NULL;
}

void CPerfAlloc_releaseBlocksBefore(uint64_t index) {
  if (atomic_load(&g_state) != STATE_STOPPED || !g_blocks || !g_blocksOwned) return;
  if (index > g_blockCount) index = g_blockCount;
  // Whole pages only: the page holding block `index` may still be read.
  size_t bytes = (size_t)index * sizeof(CPerfAlloc_Block) & ~((size_t)CPerfSupport_pageRound(1) - 1);
  if (bytes <= g_blocksReleased) return;
  (void)madvise((char *)g_blocks + g_blocksReleased, bytes - g_blocksReleased, MADV_DONTNEED);
  g_blocksReleased = bytes;
}

typedef struct LiveListing {
  CPerfAlloc_Block *out;
  uint64_t *pairs;
  uint64_t capacity, count;
} LiveListing;

static void listLive(const Slot *slot, uint64_t address, void *context) {
  LiveListing *l = context;
  if (l->count < l->capacity) {
    if (l->pairs) {
      l->pairs[2 * l->count] = address;
      l->pairs[2 * l->count + 1] = slotSize(address, slot->w0, false);
    }
    if (l->out) blockFromSlot(&l->out[l->count], slot, address);
  }
  l->count++;
}

// Copies the live blocks in address order, the tables held, as blocks (`out`) or as
// (address, size) pairs (`pairs`), up to `capacity`; returns how many are live.
static uint64_t copyLiveBlocks(CPerfAlloc_Block *out, uint64_t *pairs, uint64_t capacity) {
  if (!out && !pairs) {
    // A count: the tables' sums are exact while held.
    int64_t live = 0;
    tablesLive(&live, NULL);
    uint64_t pre = 0;
    uint32_t count = atomic_load(&g_tableCount);
    for (uint32_t i = 0; i <= count; i++) pre += (i < count ? &g_tables[i] : &g_overflow)->preLive;
    return (uint64_t)live + pre;
  }
  LiveListing listing = {.out = out, .pairs = pairs, .capacity = capacity};
  shadowSortLeaves();
  uint32_t leaves = atomic_load(&g_leafCount);
  for (uint32_t i = 0; i < leaves; i++) shadowVisitLeaf(i, listLive, &listing);
  return listing.count;
}

uint64_t CPerfAlloc_liveBlocksNow(CPerfAlloc_Block *out, uint64_t capacity) {
  if (atomic_load(&g_state) != STATE_RUNNING) return 0;
  // Marks and stop hold the tables too: one at a time.
  CPerfSupport_spinLock(&g_markLock);
  tablesHold();
  if (out) startWatchIfWanted();
  uint64_t n = copyLiveBlocks(out, NULL, capacity);
  tablesRelease(true);
  CPerfSupport_spinUnlock(&g_markLock);
  return n;
}

uint64_t CPerfAlloc_liveBlocksBeforeSession(uint64_t *pairs, uint64_t capacity) {
  if (atomic_load(&g_state) != STATE_TRACKING) return 0;
  CPerfSupport_spinLock(&g_markLock);
  tablesHold();
  uint64_t n = copyLiveBlocks(NULL, pairs, capacity);
  tablesRelease(true);
  CPerfSupport_spinUnlock(&g_markLock);
  return n;
}

const CPerfAlloc_Block *CPerfAlloc_preexistingBlocks(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED && g_preBlocks;
  if (count) *count = ok ? g_preBlockCount : 0;
  return ok ? g_preBlocks : NULL;
}

const CPerfAlloc_Freed *CPerfAlloc_freed(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  if (count) *count = ok ? g_freedCount : 0;
  return ok ? g_freedSnapshot : NULL;
}

const CPerfAlloc_Freed *CPerfAlloc_allocationsByStack(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  if (count) *count = ok ? g_stackTotalCount : 0;
  return ok ? g_stackTotals : NULL;
}

const CPerfAlloc_Mark *CPerfAlloc_marks(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  if (count) *count = ok ? atomic_load(&g_markCount) : 0;
  return ok ? g_marks : NULL;
}

const CPerfAlloc_TimelinePoint *CPerfAlloc_timeline(uint64_t *count) {
  bool ok = atomic_load(&g_state) == STATE_STOPPED;
  uint64_t n = atomic_load(&g_timelineCount);
  if (count) *count = ok ? (n < g_timelineCapacity ? n : g_timelineCapacity) : 0;
  return ok ? g_timeline : NULL;
}
