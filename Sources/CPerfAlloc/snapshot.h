// The snapshot CPerfAlloc_stop takes (live blocks, blocks from before the session, frees
// by category, statistics), handed out by snapshot.c's accessors until CPerfAlloc_release.
#ifndef CPERFALLOC_SNAPSHOT_H
#define CPERFALLOC_SNAPSHOT_H

#include "block_table.h"

extern ALLOC_HIDDEN CPerfAlloc_Block *g_blocks;
extern ALLOC_HIDDEN uint64_t g_blockCount;
extern ALLOC_HIDDEN size_t g_blocksBytes;
extern ALLOC_HIDDEN CPerfAlloc_Block *g_preBlocks;
extern ALLOC_HIDDEN uint64_t g_preBlockCount;
extern ALLOC_HIDDEN size_t g_preBlocksBytes;
extern ALLOC_HIDDEN CPerfAlloc_Freed *g_freedSnapshot;
extern ALLOC_HIDDEN uint64_t g_freedCount;
extern ALLOC_HIDDEN size_t g_freedBytes;
extern ALLOC_HIDDEN CPerfAlloc_Stats g_stats;

ALLOC_HIDDEN uint64_t snapshotFreed(const FreedTable *t, uint64_t f, uint64_t capacity);

#endif
