// Thread tables: each thread's counters and its tables of frees by category and allocations
// by stack, written by its thread alone; and the hold that quiesces every hook (marks,
// listings, stop, fork). Hot operations static inline here; thread_table.c has the rest.
#ifndef CPERFALLOC_THREAD_TABLE_H
#define CPERFALLOC_THREAD_TABLE_H

#include "shadow.h"

// MARK: - Thread tables
//
// A hook updates the shadow table and its thread's table inside a busy section. No
// statistic is shared: live blocks are sums over the tables (allocations - removed), made
// exact by a hold. A hold closes the tables (g_open), makes that store and every thread's
// busy flag ordered with membarrier (so a hook's side needs no fence), and waits until no
// thread is inside a busy section; a hook that finds the tables closed waits for them to
// open, or leaves when recording has ended. Threads beyond MAX_TABLES share g_overflow
// under g_overflowLock, which a hold takes too.

#define MAX_TABLES 256

typedef struct __attribute__((aligned(128))) ThreadTable {
  _Atomic int32_t owner;  // tid; 0: free for another thread
  _Atomic int32_t busy;   // its thread is inside a busy section
  uint32_t index;         // numbers it for freedHome (g_overflow: MAX_TABLES)
  uint32_t unused;
  // Written by its thread (or by a holder), summed by others. Live session blocks =
  // allocations - removed, summed over the tables (a block's free may be another thread's).
  uint64_t allocations, allocatedBytes, removed, removedBytes, frees, lost;
  // Blocks from before the session added minus removed (CPerfAlloc_trackAllBlocks).
  uint64_t preLive, preLiveBytes;
  FreedTable freed;
  FreedTable byStack;  // full stacks: its thread's allocations by stack (key stackId << 1)
} ThreadTable;

extern ALLOC_HIDDEN ThreadTable g_tables[MAX_TABLES];
extern ALLOC_HIDDEN _Atomic uint32_t g_tableCount;
extern ALLOC_HIDDEN ThreadTable g_overflow;
extern ALLOC_HIDDEN CPerfSupport_SpinLock g_overflowLock;
extern ALLOC_HIDDEN _Atomic int32_t g_open;
// Without membarrier, a hook's busy store is fenced (one mfence per hook).
extern ALLOC_HIDDEN bool g_fenceHooks;
// A session with no reserved addresses, no zeroing, not paused and not in its preexisting
// phase: malloc's hook skips the checks other sessions need, and takes the path of the
// session's mode (FAST_COUNTS, FAST_STACKS; FAST_NONE otherwise).
enum { FAST_NONE = 0, FAST_COUNTS = 1, FAST_STACKS = 2 };
extern ALLOC_HIDDEN _Atomic int32_t g_fastPath;
extern ALLOC_HIDDEN TLS ThreadTable *t_table;

#define BUMP(field, by) __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (by), __ATOMIC_RELAXED)

// In thread_table.c: the thread's table, claimed now; NULL when none is left.
__attribute__((noinline, cold)) ALLOC_HIDDEN ThreadTable *claimTable(void);

// The thread's side of the hold's handshake: busy, then the flag, with only the compiler kept
// from reordering them (the holder's membarrier orders the CPUs).
static inline bool tableEnter(ThreadTable *t) {
  atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
  if (UNLIKELY(g_fenceHooks))
    atomic_thread_fence(memory_order_seq_cst);
  else
    atomic_signal_fence(memory_order_seq_cst);
  if (LIKELY(atomic_load_explicit(&g_open, memory_order_relaxed))) return true;
  atomic_store_explicit(&t->busy, 0, memory_order_release);
  return false;
}

static inline void tableLeave(ThreadTable *t) { atomic_store_explicit(&t->busy, 0, memory_order_release); }

// In thread_table.c: waits while a hold lasts; false once recording has ended.
__attribute__((noinline, cold)) ALLOC_HIDDEN bool waitForOpen(void);

// The slow paths' way in: the thread's table entered, or g_overflow locked; NULL when
// recording has ended. Leave with tableRelease.
static inline ThreadTable *tableAcquire(void) {
  for (;;) {
    ThreadTable *t = t_table;
    if (UNLIKELY(!t)) t = claimTable();
    if (LIKELY(t != NULL)) {
      if (tableEnter(t)) return t;
    } else {
      CPerfSupport_spinLock(&g_overflowLock);
      if (atomic_load_explicit(&g_open, memory_order_relaxed)) return &g_overflow;
      CPerfSupport_spinUnlock(&g_overflowLock);
    }
    if (!waitForOpen()) return NULL;
  }
}

static inline void tableRelease(ThreadTable *t) {
  if (t == &g_overflow)
    CPerfSupport_spinUnlock(&g_overflowLock);
  else
    tableLeave(t);
}

// In thread_table.c: never from a hook. A hold closes the tables and waits for the hooks;
// the caller then has them alone (and g_overflowLock) until tablesRelease, which opens
// them again if `reopen`.
ALLOC_HIDDEN void tablesHold(void);
ALLOC_HIDDEN void tablesRelease(bool reopen);
// Hands on the tables of threads that ended without CPerfAlloc_threadEnding (threads the
// sampler's pthread_create did not start): their counts stay, the next new thread adds to
// them. At marks, after the hold (a claim takes a table by compare-and-swap).
ALLOC_HIDDEN void reclaimDeadTables(void);
// Zeroes every table's session counters and tables; with `all`, the preexisting counts too.
ALLOC_HIDDEN void resetTables(bool all);
// Zeroes every table and opens them (a session's or the tracking phase's start).
ALLOC_HIDDEN void openTables(void);

// The session's live blocks and bytes, summed over the tables (racy unless held).
static inline void tablesLive(int64_t *blocks, int64_t *bytes) {
  uint64_t b = 0, n = 0;
  uint32_t count = atomic_load_explicit(&g_tableCount, memory_order_acquire);
  for (uint32_t i = 0; i <= count; i++) {
    ThreadTable *x = i < count ? &g_tables[i] : &g_overflow;
    n += __atomic_load_n(&x->allocations, __ATOMIC_RELAXED) - __atomic_load_n(&x->removed, __ATOMIC_RELAXED);
    b += __atomic_load_n(&x->allocatedBytes, __ATOMIC_RELAXED) - __atomic_load_n(&x->removedBytes, __ATOMIC_RELAXED);
  }
  if (blocks) *blocks = (int64_t)n;
  if (bytes) *bytes = (int64_t)b;
}

// An allocation counted under its stack (0: none), keyed by stackId << 1 (even, so never
// taken for a size class).
static inline __attribute__((always_inline)) void countByStack(ThreadTable *t, uint32_t stackId, uint64_t size) {
  if (stackId) freedAdd(&t->byStack, t->index, (uint64_t)stackId << 1, size);
}

#endif
