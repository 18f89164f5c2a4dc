// The snapshot CPerfAlloc_stop takes (live blocks, blocks from before the session, frees
// by category, statistics), handed out by snapshot.c's accessors until CPerfAlloc_release.
#ifndef CPERFALLOC_SNAPSHOT_H
#define CPERFALLOC_SNAPSHOT_H

#include "shadow.h"

extern ALLOC_HIDDEN CPerfAlloc_Block *g_blocks;
extern ALLOC_HIDDEN uint64_t g_blockCount;
extern ALLOC_HIDDEN size_t g_blocksBytes;
extern ALLOC_HIDDEN size_t g_blocksReleased;  // bytes of g_blocks given back (CPerfAlloc_releaseBlocksBefore)
extern ALLOC_HIDDEN bool g_blocksOwned;       // false: g_blocks is the caller's (CPerfAlloc_stopInto)
extern ALLOC_HIDDEN CPerfAlloc_Block *g_preBlocks;
extern ALLOC_HIDDEN uint64_t g_preBlockCount;
extern ALLOC_HIDDEN size_t g_preBlocksBytes;
extern ALLOC_HIDDEN CPerfAlloc_Freed *g_freedSnapshot;
extern ALLOC_HIDDEN uint64_t g_freedCount;
extern ALLOC_HIDDEN size_t g_freedBytes;
extern ALLOC_HIDDEN CPerfAlloc_Stats g_stats;

extern ALLOC_HIDDEN CPerfAlloc_Freed *g_stackTotals;
extern ALLOC_HIDDEN uint64_t g_stackTotalCount;
extern ALLOC_HIDDEN size_t g_stackTotalsBytes;

// A live slot as a listed block (CPerfAlloc_Block's three words); its metadata read now
// (the block is live and cannot be freed while the tables are held).
static inline void blockFromSlot(CPerfAlloc_Block *b, const Slot *slot, uint64_t address) {
  const uint64_t low48 = (1ull << 48) - 1;
  uint64_t w0 = slot->w0;
  uint64_t size = slotSize(address, w0, false);
  // 0 while the runtime has not yet stored the metadata: no object yet.
  uint64_t metadata = (w0 & OBJECT_BIT) ? *(const uint64_t *)(uintptr_t)address : 0;
  uint64_t stack = (w0 & PREEXISTING_BIT) ? 0 : (w0 >> STACK_SHIFT) & STACK_MASK;
  uint64_t generation = (w0 >> GENERATION_SHIFT) & 0xFFFF;
  b->addressWord = (address & low48) | (stack & 0xFFFF) << 48;
  // A word that is no user-space pointer is no metadata pointer: the object has none.
  b->metadataWord = (metadata <= low48 ? metadata : 0) | (stack >> 16) << 48;
  b->sizeWord = (size < CPerfAlloc_BlockSizeMask ? size : CPerfAlloc_BlockSizeMask) |
                ((w0 & PREEXISTING_BIT) ? CPerfAlloc_BlockPreexistingBit : 0) |
                (metadata ? CPerfAlloc_BlockObjectBit : 0) | generation << 48;
}

// Copies a freed-style table into `out` from index f; with `stackKeys`, keys are
// stackId << 1 and leave as stack ids. Returns the next index.
ALLOC_HIDDEN uint64_t snapshotFreed(const FreedTable *t, CPerfAlloc_Freed *out, uint64_t f, uint64_t capacity,
                                    bool stackKeys);

#endif
