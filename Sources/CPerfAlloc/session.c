// Session control: start, stop, release and tracking from process start, pausing and
// generation marks; and the definitions of the state the hooks read (alloc_internal.h).
#include "alloc_support.h"
#include "block_table.h"
#include "leak_support.h"
#include "nursery.h"
#include "record.h"
#include "snapshot.h"
#include "stack_table.h"
#include "stack_walk.h"
#include "swift_objects.h"
#include "timeline.h"

// MARK: - State (alloc_internal.h says what each is)

ALLOC_HIDDEN _Atomic int32_t g_state = STATE_IDLE;
ALLOC_HIDDEN _Atomic int32_t g_recording;
ALLOC_HIDDEN _Atomic int32_t g_preexistingPhase;
ALLOC_HIDDEN bool g_tracksPreexisting;
ALLOC_HIDDEN _Atomic int32_t g_paused;
ALLOC_HIDDEN int32_t g_mode;
ALLOC_HIDDEN int32_t g_maxDepth;
ALLOC_HIDDEN uint64_t g_startNs;
ALLOC_HIDDEN uint64_t g_stopNs;
ALLOC_HIDDEN _Atomic uint32_t g_generation;
ALLOC_HIDDEN _Atomic uint64_t g_generationBits;
ALLOC_HIDDEN _Atomic int64_t g_peakLiveBytes;
ALLOC_HIDDEN TLS int t_inHook;
ALLOC_HIDDEN TLS int32_t t_ignoringAllocations;
ALLOC_HIDDEN TLS int32_t t_tid;
ALLOC_HIDDEN TLS uint64_t t_tidBits;

int32_t CPerfAlloc_gettid(void) { return (int32_t)syscall(SYS_gettid); }

// MARK: - Session control

static void unmapAll(void) {
  for (int i = 0; i < STRIPES; i++) {
    Stripe *s = &g_stripes[i];
    if (s->slots) munmap(s->slots, s->mappedBytes);
    if (s->freed.slots) munmap(s->freed.slots, FREED_TABLE_BYTES);
    if (g_stripeByStack[i].slots) munmap(g_stripeByStack[i].slots, FREED_TABLE_BYTES);
    g_stripeByStack[i] = (FreedTable){0};
    uint32_t keep = atomic_load(&s->lock);  // release() holds it: stay locked
    memset(s, 0, sizeof(*s));
    atomic_store(&s->lock, keep);
  }
  if (g_growScratch) munmap(g_growScratch, g_growScratchBytes);
  g_growScratch = NULL;
  g_growScratchBytes = 0;
  if (g_stackSlots) munmap(g_stackSlots, (size_t)STACK_SLOTS * sizeof(StackSlot));
  if (g_stackArena) munmap(g_stackArena, (size_t)STACK_ARENA_FRAMES * sizeof(uint64_t));
  if (g_timeline) munmap(g_timeline, pageRound(g_timelineCapacity * sizeof(CPerfAlloc_TimelinePoint)));
  if (g_blocks) munmap(g_blocks, g_blocksBytes);
  if (g_preBlocks) munmap(g_preBlocks, g_preBlocksBytes);
  g_preBlocks = NULL;
  g_preBlockCount = 0;
  if (g_freedSnapshot) munmap(g_freedSnapshot, g_freedBytes);
  if (g_stackTotals) munmap(g_stackTotals, g_stackTotalsBytes);
  g_stackTotals = NULL;
  g_stackTotalCount = 0;
  g_stackSlots = NULL;
  g_stackArena = NULL;
  g_timeline = NULL;
  g_blocks = NULL;
  g_freedSnapshot = NULL;
  g_blockCount = g_freedCount = 0;
}

static int registerAtfork(void) {
  static bool registered;
  if (registered) return 0;
  int rc = pthread_atfork(forkPrepare, forkParent, forkChild);
  if (rc == 0) registered = true;
  return rc;
}

// Stops the hooks' tracking of a session that never started (start failed).
static void endTracking(void) {
  for (int i = 0; i < STRIPES; i++) CPerfSupport_spinLock(&g_stripes[i].lock);
  atomic_store(&g_recording, 0);
  atomic_store(&g_preexistingPhase, 0);
  for (int i = STRIPES - 1; i >= 0; i--) CPerfSupport_spinUnlock(&g_stripes[i].lock);
}

int32_t CPerfAlloc_start(const CPerfAlloc_Config *config, CPerfAlloc_Error *error) {
  if (error) memset(error, 0, sizeof(*error));
  if (!CPERFALLOC_INTERPOSES)
    return CPerfSupport_fail(error, CPerfAlloc_ErrorState,
                             "the allocations instrument is not available under ThreadSanitizer (no malloc interposer)",
                             0);
  if (!config) return CPerfSupport_fail(error, CPerfAlloc_ErrorInvalidMode, "config", 0);
  if (config->mode != CPerfAlloc_ModeCountsOnly && config->mode != CPerfAlloc_ModeFullStacks)
    return CPerfSupport_fail(error, CPerfAlloc_ErrorInvalidMode, "mode", 0);
  if (config->mode == CPerfAlloc_ModeFullStacks &&
      (config->maxDepth < CPerfAlloc_MinDepth || config->maxDepth > CPerfAlloc_MaxDepth))
    return CPerfSupport_fail(error, CPerfAlloc_ErrorInvalidDepth, "maxDepth", 0);
  int32_t expected = STATE_IDLE;
  bool continuing = false;  // the tables already hold the blocks allocated since process start
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) {
    expected = STATE_TRACKING;
    if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY))
      return CPerfSupport_fail(error, CPerfAlloc_ErrorBusy, "start", 0);
    continuing = true;
  }

  int rc = registerAtfork();
  if (rc != 0) {
    if (continuing) {
      atomic_store(&g_state, STATE_TRACKING);
      return CPerfSupport_fail(error, CPerfAlloc_ErrorSystem, "pthread_atfork", rc);
    }
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSupport_fail(error, CPerfAlloc_ErrorSystem, "pthread_atfork", rc);
  }
  lookUpObjectSites();

  g_mode = config->mode;
  g_maxDepth = config->maxDepth > 0 ? config->maxDepth : CPerfAlloc_DefaultDepth;
  g_timelineIntervalNs =
      1000ull * (config->timelineIntervalUs ? config->timelineIntervalUs : CPerfAlloc_DefaultTimelineIntervalUs);
  g_timelineCapacity = config->timelineCapacity ? config->timelineCapacity : (1u << 20);
  g_timeline = mapBytes(pageRound(g_timelineCapacity * sizeof(CPerfAlloc_TimelinePoint)));
  if (g_mode == CPerfAlloc_ModeFullStacks) {
    g_stackSlots = mapBytes((size_t)STACK_SLOTS * sizeof(StackSlot));
    g_stackArena = mapBytes((size_t)STACK_ARENA_FRAMES * sizeof(uint64_t));
  }
  if (!g_timeline || (g_mode == CPerfAlloc_ModeFullStacks && (!g_stackSlots || !g_stackArena))) {
    int saved = errno;
    if (continuing) endTracking();
    unmapAll();
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSupport_fail(error, CPerfAlloc_ErrorSystem, "mmap", saved);
  }
  for (int i = 0; !continuing && i < STRIPES; i++) {
    if (!stripeMap(&g_stripes[i], INITIAL_SLOTS)) {
      int saved = errno;
      unmapAll();
      atomic_store(&g_state, STATE_IDLE);
      return CPerfSupport_fail(error, CPerfAlloc_ErrorSystem, "mmap", saved);
    }
  }
  atomic_store(&g_stackArenaUsed, 0);
  atomic_store(&g_stackCount, 0);
  atomic_store(&g_lostStacks, 0);
  atomic_store(&g_timelineCount, 0);
  atomic_store(&g_lostTimeline, 0);
  atomic_store(&g_markCount, 0);
  atomic_store(&g_generation, 0);
  atomic_store(&g_generationBits, 0);
  atomic_store(&g_peakLiveBytes, 0);
  memset(&g_stats, 0, sizeof(g_stats));
  calibrateClock();
  g_session++;
  atomic_store(&g_nowMicros, 0);
  atomic_store(&g_timelineLast, 0);
  timelineAppend(g_startNs, 0);
  g_tracksPreexisting = continuing;
  // A session that continues from process start keeps every block in the stripes, where
  // the preexisting ones already are.
  g_nurseriesUsable = !continuing && registerMembarrier();
  uint32_t nurseries = atomic_load(&g_nurseryCount);
  for (uint32_t i = 0; i < nurseries; i++) resetNursery(g_nurseries[i]);
  resetNursery(&g_overflow);
  g_overflow.index = MAX_NURSERIES;
  atomic_store(&g_nurseriesOn, g_nurseriesUsable);
  atomic_store(&g_countsFast, g_nurseriesUsable && g_mode == CPerfAlloc_ModeCountsOnly && !g_zeroNewBlocks);
  if (continuing) {
    // From here on, blocks are the session's: the phase ends under every stripe lock, so
    // each block is on one side of it.
    for (int i = 0; i < STRIPES; i++) CPerfSupport_spinLock(&g_stripes[i].lock);
    atomic_store(&g_preexistingPhase, 0);
    for (int i = STRIPES - 1; i >= 0; i--) CPerfSupport_spinUnlock(&g_stripes[i].lock);
  }
  atomic_store(&g_paused, 0);
  atomic_store(&g_state, STATE_RUNNING);
  atomic_store(&g_recording, 1);
  return CPerfAlloc_OK;
}

int32_t CPerfAlloc_trackAllBlocks(void) {
  int32_t expected = STATE_IDLE;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) return CPerfAlloc_ErrorBusy;
  if (registerAtfork() != 0) {
    atomic_store(&g_state, STATE_IDLE);
    return CPerfAlloc_ErrorSystem;
  }
  lookUpObjectSites();
  for (int i = 0; i < STRIPES; i++) {
    if (!stripeMap(&g_stripes[i], INITIAL_SLOTS)) {
      unmapAll();
      atomic_store(&g_state, STATE_IDLE);
      return CPerfAlloc_ErrorSystem;
    }
  }
  atomic_store(&g_preexistingPhase, 1);
  g_zeroNewBlocks = true;
  atomic_store(&g_state, STATE_TRACKING);
  atomic_store(&g_recording, 1);
  return CPerfAlloc_OK;
}

// The harness's hook for the leaks instrument (documented in CPerfAlloc.h): a scenario's
// child process has PERFHARNESS_TRACK_ALL_BLOCKS=1 so that the blocks allocated before its
// recording are known to the memory graph. It runs from the executable's .preinit_array,
// before any shared library's initializer (the Swift runtime's first metadata pages, the
// main thread's Foundation state), with the environment as an argument (libc's own
// getenv may not be set up yet), and removes the variable so that processes the scenario
// starts do not pay for it.
static void trackAllBlocksIfAsked(int argc, char **argv, char **envp) {
  (void)argc;
  (void)argv;
  for (char **entry = envp; entry && *entry; entry++) {
    if (strcmp(*entry, "PERFHARNESS_TRACK_ALL_BLOCKS=1") != 0) continue;
    for (char **rest = entry; *rest; rest++) rest[0] = rest[1];
    (void)CPerfAlloc_trackAllBlocks();
    return;
  }
}
__attribute__((section(".preinit_array"),
               used)) static void (*const g_trackAllBlocksAtStart)(int, char **, char **) = trackAllBlocksIfAsked;

int32_t CPerfAlloc_setPaused(int32_t paused) {
  if (atomic_load(&g_state) != STATE_RUNNING) return 0;
  int32_t previous = atomic_exchange(&g_paused, paused ? 1 : 0);
  if (paused) {
    // The frameless counts path records without looking at the flag: while paused every
    // allocation takes the path that does.
    atomic_store(&g_countsFast, 0);
  } else if (previous) {
    atomic_store(&g_countsFast, g_nurseriesUsable && g_mode == CPerfAlloc_ModeCountsOnly && !g_zeroNewBlocks &&
                                    atomic_load(&g_reservedCount) == 0);
  }
  return previous;
}

int32_t CPerfAlloc_setIgnoringAllocations(int32_t ignoring) {
  int32_t previous = t_ignoringAllocations;
  t_ignoringAllocations = ignoring;
  return previous;
}

int32_t CPerfAlloc_isRecording(void) { return atomic_load_explicit(&g_recording, memory_order_relaxed); }

int32_t CPerfAlloc_markGeneration(CPerfAlloc_Mark *out) {
  if (atomic_load(&g_state) != STATE_RUNNING) return CPerfAlloc_ErrorState;
  CPerfSupport_spinLock(&g_markLock);
  uint64_t count = atomic_load(&g_markCount);
  if (count >= CPerfAlloc_MaxMarks) {
    CPerfSupport_spinUnlock(&g_markLock);
    return CPerfAlloc_ErrorState;
  }
  uint32_t generation = atomic_fetch_add(&g_generation, 1) + 1;
  atomic_store(&g_generationBits, (uint64_t)(generation > 0xFFFF ? 0xFFFF : generation) << ADDR_BITS);
  // The young blocks go to the stripes, so the count is exact at the mark.
  drainNurseries();
  int64_t blocks = 0;
  nurseriesLive(&blocks, NULL);
  for (int i = 0; i < STRIPES; i++) blocks += (int64_t)__atomic_load_n(&g_stripes[i].live, __ATOMIC_RELAXED);
  int64_t live = sumLiveBytes();
  reopenNurseries();
  CPerfAlloc_Mark mark = {
      .generation = generation,
      .timestampNs = CPerfSupport_monotonicNs(),
      .liveBytes = live > 0 ? (uint64_t)live : 0,
      .liveBlocks = blocks > 0 ? (uint64_t)blocks : 0,
  };
  g_marks[count] = mark;
  atomic_store(&g_markCount, count + 1);
  CPerfSupport_spinUnlock(&g_markLock);
  if (out) *out = mark;
  return CPerfAlloc_OK;
}

int32_t CPerfAlloc_stop(CPerfAlloc_Error *error) {
  if (error) memset(error, 0, sizeof(*error));
  int32_t expected = STATE_RUNNING;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY))
    return CPerfSupport_fail(error, CPerfAlloc_ErrorState, "stop without a running session", 0);

  // Holding every stripe lock: no hook is mid-update, frees of tracked blocks wait (so
  // every live object's first word can still be read), and after the flag drops no
  // hook touches a table again. Nothing here may malloc: the guard makes sure.
  t_inHook = 1;
  CPerfSupport_spinLock(&g_markLock);
  atomic_store(&g_countsFast, 0);
  drainNurseries();  // every live block is in the stripes from here on
  for (int i = 0; i < STRIPES; i++) CPerfSupport_spinLock(&g_stripes[i].lock);
  atomic_store(&g_recording, 0);
  startWatchIfWanted();
  g_stopNs = CPerfSupport_monotonicNs();

  uint64_t live = 0, freedEntries = 0, preLive = 0, stackEntries = 0;
  for (int i = 0; i < STRIPES; i++) {
    live += g_stripes[i].live;
    preLive += g_stripes[i].preLive;
    freedEntries += g_stripes[i].freed.used + (g_stripes[i].freed.lost ? 1 : 0);
    stackEntries += g_stripeByStack[i].used + (g_stripeByStack[i].lost ? 1 : 0);
  }
  uint32_t nurseries = atomic_load(&g_nurseryCount);
  for (uint32_t i = 0; i <= nurseries; i++) {
    const Nursery *x = i < nurseries ? g_nurseries[i] : &g_overflow;
    freedEntries += x->freed.used + (x->freed.lost ? 1 : 0);
    stackEntries += x->byStack.used + (x->byStack.lost ? 1 : 0);
  }
  g_blocksBytes = pageRound((live ? live : 1) * sizeof(CPerfAlloc_Block));
  g_blocks = mapBytes(g_blocksBytes);
  g_blocksReleased = 0;
  // Populated a stripe's share at a time, just before it is written: populated whole, the
  // listing was held beside every table still unlisted (a big heap's peak memory).
  size_t populated = 0;
  g_freedBytes = pageRound((freedEntries ? freedEntries : 1) * sizeof(CPerfAlloc_Freed));
  g_freedSnapshot = mapBytes(g_freedBytes);
  g_stackTotalsBytes = pageRound((stackEntries ? stackEntries : 1) * sizeof(CPerfAlloc_Freed));
  g_stackTotals = mapBytes(g_stackTotalsBytes);
  if (g_tracksPreexisting) {
    g_preBlocksBytes = pageRound((preLive ? preLive : 1) * sizeof(CPerfAlloc_Block));
    g_preBlocks = mapBytes(g_preBlocksBytes);
  }
  int mapErrno = errno;

  CPerfAlloc_Stats *st = &g_stats;
  st->startNs = g_startNs;
  st->stopNs = g_stopNs;
  st->mode = g_mode;
  st->swiftObjectSites = g_objectSiteCount;
  st->nurseries = atomic_load(&g_nurseryCount);
  st->blockTableBytes += g_growScratchBytes;
  uint64_t n = 0, f = 0, pre = 0, t = 0;
  for (int i = 0; i < STRIPES; i++) {
    Stripe *s = &g_stripes[i];
    st->totalAllocations += s->allocations;
    st->totalBytes += s->allocatedBytes;
    st->trackedFrees += s->frees;
    st->liveBlocks += s->live;
    st->liveBytes += s->liveBytes;
    st->lostBlocks += s->lostBlocks;
    st->lostFreedKeys += s->freed.lost;
    st->blockTableBytes += s->mappedBytes;
    if (g_blocks) {
      size_t upTo = pageRound((size_t)(n + s->live) * sizeof(CPerfAlloc_Block));
      if (upTo > g_blocksBytes) upTo = g_blocksBytes;
      if (upTo > populated) {
        populateBytes((char *)g_blocks + populated, upTo - populated);
        populated = upTo;
      }
    }
    for (uint64_t j = 0; g_blocks && j < s->capacity; j++) {
      const Slot *slot = &s->slots[j];
      uint64_t key = slot->w0 & ADDR_MASK;
      if (key <= KEY_TOMBSTONE) continue;
      CPerfAlloc_Block *b;
      if (slot->w1 & PREEXISTING_BIT) {
        if (!g_preBlocks || pre >= preLive) continue;
        b = &g_preBlocks[pre++];
      } else {
        if (n >= live) continue;
        b = &g_blocks[n++];
      }
      b->address = key << 4;
      b->size = slot->w1 & SIZE_MASK;
      b->tid = (int32_t)((slot->w1 >> 40) & TID_MASK);
      b->flags = (slot->w1 & OBJECT_BIT) ? CPerfAlloc_BlockSwiftObject : 0;
      b->metadata = (slot->w1 & OBJECT_BIT) ? *(uint64_t *)(uintptr_t)b->address : 0;
      b->generation = (uint32_t)((slot->w0 >> ADDR_BITS) & 0xFFFF);
      b->stackId = (uint32_t)slot->w2;
      b->timestampNs = g_startNs + (slot->w2 >> 32) * 1000;
    }
    f = snapshotFreed(&s->freed, g_freedSnapshot, f, freedEntries, false);
    t = snapshotFreed(&g_stripeByStack[i], g_stackTotals, t, stackEntries, true);
    st->lostStackTotals += g_stripeByStack[i].lost;
    // Listed: no hook reads a table again (the flag is down), so its memory goes now rather
    // than at release, and the listing and the tables are never held whole together (a big
    // heap's peak memory).
    if (g_blocks && s->slots) {
      munmap(s->slots, s->mappedBytes);
      s->slots = NULL;
      s->capacity = 0;
      s->mappedBytes = 0;
      s->used = 0;
    }
  }
  if (g_blocks && g_growScratch) {
    munmap(g_growScratch, g_growScratchBytes);
    g_growScratch = NULL;
    g_growScratchBytes = 0;
  }
  for (uint32_t i = 0; i <= nurseries; i++) {
    const Nursery *x = i < nurseries ? g_nurseries[i] : &g_overflow;
    st->totalAllocations += x->allocations;
    st->totalBytes += x->allocatedBytes;
    st->trackedFrees += x->frees;
    st->lostFreedKeys += x->freed.lost;
    if (i < nurseries) st->blockTableBytes += sizeof(Nursery);
    f = snapshotFreed(&x->freed, g_freedSnapshot, f, freedEntries, false);
    t = snapshotFreed(&x->byStack, g_stackTotals, t, stackEntries, true);
    st->lostStackTotals += x->byStack.lost;
  }
  g_blockCount = n;
  g_preBlockCount = pre;
  st->preexistingBlocks = pre;
  for (int i = 0; i < STRIPES; i++) st->preexistingBytes += g_stripes[i].preLiveBytes;
  g_freedCount = f;
  g_stackTotalCount = t;
  (void)sumLiveBytes();  // the peak, including the final state
  int64_t peak = atomic_load(&g_peakLiveBytes);
  st->peakLiveBytes = peak > 0 ? (uint64_t)peak : 0;
  timelineAppend(g_stopNs, (int64_t)st->liveBytes);
  st->lostStacks = atomic_load(&g_lostStacks);
  st->lostTimeline = atomic_load(&g_lostTimeline);
  st->stackCount = atomic_load(&g_stackCount);
  st->timelineCount = atomic_load(&g_timelineCount);
  st->markCount = atomic_load(&g_markCount);
  st->stackTableBytes =
      g_stackSlots ? st->stackCount * sizeof(StackSlot) + atomic_load(&g_stackArenaUsed) * sizeof(uint64_t) : 0;

  for (int i = STRIPES - 1; i >= 0; i--) CPerfSupport_spinUnlock(&g_stripes[i].lock);
  CPerfSupport_spinUnlock(&g_markLock);
  t_inHook = 0;
  atomic_store(&g_state, STATE_STOPPED);
  if (!g_blocks || !g_freedSnapshot)
    return CPerfSupport_fail(error, CPerfAlloc_ErrorSystem, "mmap (snapshot)", mapErrno);
  return CPerfAlloc_OK;
}

void CPerfAlloc_release(void) {
  int32_t expected = STATE_STOPPED;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) return;
  // Hooks that raced with stop re-check the flag under these locks and leave.
  for (int i = 0; i < STRIPES; i++) CPerfSupport_spinLock(&g_stripes[i].lock);
  unmapAll();
  for (int i = STRIPES - 1; i >= 0; i--) CPerfSupport_spinUnlock(&g_stripes[i].lock);
  atomic_store(&g_state, STATE_IDLE);
}
