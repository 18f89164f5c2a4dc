// The snapshot's storage and accessors, and the live-block listings taken while a session
// runs (CPerfAlloc_liveBlocksNow) or before it (CPerfAlloc_liveBlocksBeforeSession).
#include "snapshot.h"

#include "leak_support.h"
#include "nursery.h"
#include "timeline.h"

ALLOC_HIDDEN CPerfAlloc_Block *g_blocks;
ALLOC_HIDDEN uint64_t g_blockCount;
ALLOC_HIDDEN size_t g_blocksBytes;
ALLOC_HIDDEN size_t g_blocksReleased;
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
  if (atomic_load(&g_state) != STATE_STOPPED || !g_blocks) return;
  if (index > g_blockCount) index = g_blockCount;
  // Whole pages only: the page holding block `index` may still be read.
  size_t bytes = (size_t)index * sizeof(CPerfAlloc_Block) & ~((size_t)CPerfSupport_pageRound(1) - 1);
  if (bytes <= g_blocksReleased) return;
  (void)madvise((char *)g_blocks + g_blocksReleased, bytes - g_blocksReleased, MADV_DONTNEED);
  g_blocksReleased = bytes;
}

// Copies the live blocks, each stripe under its lock, as blocks (`out`) or as (address,
// size) pairs (`pairs`), up to `capacity`; returns how many are live.
static uint64_t copyLiveBlocks(CPerfAlloc_Block *out, uint64_t *pairs, uint64_t capacity) {
  uint64_t n = 0;
  for (int i = 0; i < STRIPES; i++) {
    Stripe *s = &g_stripes[i];
    CPerfSupport_spinLock(&s->lock);
    for (uint64_t j = 0; j < s->capacity; j++) {
      const Slot *slot = &s->slots[j];
      uint64_t key = slot->w0 & ADDR_MASK;
      if (key <= KEY_TOMBSTONE) continue;
      if (pairs && n < capacity) {
        pairs[2 * n] = key << 4;
        pairs[2 * n + 1] = slot->w1 & SIZE_MASK;
      }
      if (out && n < capacity) {
        CPerfAlloc_Block *b = &out[n];
        b->address = key << 4;
        b->size = slot->w1 & SIZE_MASK;
        b->tid = (int32_t)((slot->w1 >> 40) & TID_MASK);
        // Live, and its table entry cannot go while the stripe is locked: its first word
        // is readable (0 while the runtime has not yet stored the metadata).
        b->metadata = (slot->w1 & OBJECT_BIT) ? *(const uint64_t *)(uintptr_t)b->address : 0;
        b->flags = ((slot->w1 & OBJECT_BIT) && b->metadata ? CPerfAlloc_BlockSwiftObject : 0) |
                   ((slot->w1 & PREEXISTING_BIT) ? CPerfAlloc_BlockPreexisting : 0);
        b->generation = (uint32_t)((slot->w0 >> ADDR_BITS) & 0xFFFF);
        b->stackId = (slot->w1 & PREEXISTING_BIT) ? 0 : (uint32_t)slot->w2;
        b->timestampNs = g_startNs + (slot->w2 >> 32) * 1000;
      }
      n++;
    }
    CPerfSupport_spinUnlock(&s->lock);
  }
  return n;
}

uint64_t CPerfAlloc_liveBlocksNow(CPerfAlloc_Block *out, uint64_t capacity) {
  if (atomic_load(&g_state) != STATE_RUNNING) return 0;
  // Marks and stop drain too: one drain at a time.
  CPerfSupport_spinLock(&g_markLock);
  drainNurseries();
  if (out) startWatchIfWanted();
  uint64_t n = copyLiveBlocks(out, NULL, capacity);
  reopenNurseries();
  CPerfSupport_spinUnlock(&g_markLock);
  return n;
}

uint64_t CPerfAlloc_liveBlocksBeforeSession(uint64_t *pairs, uint64_t capacity) {
  if (atomic_load(&g_state) != STATE_TRACKING) return 0;
  return copyLiveBlocks(NULL, pairs, capacity);
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
