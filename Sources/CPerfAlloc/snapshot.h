// The snapshot CPerfAlloc_stop takes (live blocks, blocks from before the session, frees
// by category, statistics), handed out by snapshot.c's accessors until CPerfAlloc_release.
#ifndef CPERFALLOC_SNAPSHOT_H
#define CPERFALLOC_SNAPSHOT_H

#include "block_table.h"

extern ALLOC_HIDDEN CPerfAlloc_Block *g_blocks;
extern ALLOC_HIDDEN uint64_t g_blockCount;
extern ALLOC_HIDDEN size_t g_blocksBytes;
extern ALLOC_HIDDEN size_t g_blocksReleased;  // bytes of g_blocks given back (CPerfAlloc_releaseBlocksBefore)
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

// Copies a freed-style table into `out` from index f; with `stackKeys`, keys are
// stackId << 1 and leave as stack ids. Returns the next index.
ALLOC_HIDDEN uint64_t snapshotFreed(const FreedTable *t, CPerfAlloc_Freed *out, uint64_t f, uint64_t capacity,
                                    bool stackKeys);

#endif
