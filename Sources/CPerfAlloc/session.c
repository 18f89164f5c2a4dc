// Session control: start, stop, release and tracking from process start, pausing and
// generation marks; and the definitions of the state the hooks read (alloc_internal.h).
#include "alloc_support.h"
#include "leak_support.h"
#include "record.h"
#include "shadow.h"
#include "snapshot.h"
#include "stack_table.h"
#include "stack_walk.h"
#include "swift_objects.h"
#include "thread_table.h"
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

int32_t CPerfAlloc_gettid(void) { return (int32_t)syscall(SYS_gettid); }

// MARK: - Session control

static void unmapAll(void) {
  shadowUnmapAll();
  resetTables(true);
  if (g_stackSlots) munmap(g_stackSlots, (size_t)STACK_SLOTS * sizeof(StackSlot));
  if (g_stackArena) munmap(g_stackArena, (size_t)STACK_ARENA_FRAMES * sizeof(uint64_t));
  if (g_timeline) munmap(g_timeline, pageRound(g_timelineCapacity * sizeof(CPerfAlloc_TimelinePoint)));
  if (g_blocks && g_blocksOwned) munmap(g_blocks, g_blocksBytes);
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
  tablesHold();
  atomic_store(&g_recording, 0);
  atomic_store(&g_preexistingPhase, 0);
  tablesRelease(false);
}

// The hooks' fast path for this session's mode (g_fastPath), zeroing aside.
static int32_t fastPathOfMode(void) {
  if (g_zeroNewBlocks) return FAST_NONE;
  return g_mode == CPerfAlloc_ModeCountsOnly   ? FAST_COUNTS
         : g_mode == CPerfAlloc_ModeFullStacks ? FAST_STACKS
                                               : FAST_NONE;
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
  if (!shadowMapTop()) {
    int saved = errno;
    if (continuing) endTracking();
    unmapAll();
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSupport_fail(error, CPerfAlloc_ErrorSystem, "mmap", saved);
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
  // Initialized first: a start can come before the constructor that fills the CPU model.
  __builtin_cpu_init();
  g_stackCacheWide = __builtin_cpu_supports("avx2");
  g_session++;
  atomic_store(&g_nowMicros, 0);
  atomic_store(&g_timelineLast, 0);
  timelineAppend(g_startNs, 0);
  g_tracksPreexisting = continuing;
  if (continuing) {
    // From here on, blocks are the session's: the phase ends while the tables are held, so
    // each block is on one side of it. The preexisting blocks' counts stay.
    tablesHold();
    resetTables(false);
    atomic_store(&g_preexistingPhase, 0);
    tablesRelease(true);
  } else {
    openTables();
  }
  atomic_store(&g_fastPath, fastPathOfMode());
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
  if (!shadowMapTop()) {
    atomic_store(&g_state, STATE_IDLE);
    return CPerfAlloc_ErrorSystem;
  }
  openTables();
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
    // The fast paths record without looking at the flag: while paused every allocation
    // takes the path that does.
    atomic_store(&g_fastPath, FAST_NONE);
  } else if (previous) {
    atomic_store(&g_fastPath, atomic_load(&g_reservedCount) == 0 ? fastPathOfMode() : FAST_NONE);
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
  atomic_store(&g_generationBits, (uint64_t)(generation > 0xFFFF ? 0xFFFF : generation) << GENERATION_SHIFT);
  // Held, so the tables' sums are exact at the mark.
  tablesHold();
  int64_t blocks = 0, live = 0;
  tablesLive(&blocks, &live);
  tablesRelease(true);
  notePeakLiveBytes(live);
  // Not while held: it needs no hold, and the program's allocations wait during one.
  reclaimDeadTables();
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

// The stop's listing: session blocks into g_blocks, preexisting ones into g_preBlocks.
typedef struct StopListing {
  uint64_t blocks, blockCapacity, pre, preCapacity;
  size_t populated;  // bytes of g_blocks populated so far
} StopListing;

static void listAtStop(const Slot *slot, uint64_t address, void *context) {
  StopListing *l = context;
  if (slot->w0 & PREEXISTING_BIT) {
    if (g_preBlocks && l->pre < l->preCapacity) blockFromSlot(&g_preBlocks[l->pre++], slot, address);
    return;
  }
  if (!g_blocks || l->blocks >= l->blockCapacity) return;
  size_t end = (size_t)(l->blocks + 1) * sizeof(CPerfAlloc_Block);
  if (g_blocksOwned && end > l->populated) {
    // A leaf's worth ahead at a time, just before it is written: populated whole, the listing
    // was held beside every leaf still unlisted (a big heap's peak memory). The caller's
    // memory (CPerfAlloc_stopInto) takes its pages as it is written.
    size_t upTo = pageRound(end + (size_t)LEAF_SLOTS / 4 * sizeof(CPerfAlloc_Block));
    if (upTo > g_blocksBytes) upTo = g_blocksBytes;
    populateBytes((char *)g_blocks + l->populated, upTo - l->populated);
    l->populated = upTo;
  }
  blockFromSlot(&g_blocks[l->blocks++], slot, address);
}

// MARK: - The listing's pages, populated ahead of it

// A big listing's first touches (the kernel clearing each page: 366 MB for 16 M blocks) were
// half the stop's time. A second thread populates its pages ahead of the writer while the
// writer lists, at most a window ahead: the leaves are unmapped as they are listed, and a
// listing populated whole beside them all raised a big heap's peak memory.
#define POPULATE_WINDOW ((size_t)8 << 20)
#define POPULATE_CHUNK  ((size_t)1 << 20)

static uint64_t g_populateMinBytes = (uint64_t)32 << 20;

uint64_t CPerfAlloc_setPopulateAheadBytes(uint64_t bytes) {
  uint64_t previous = g_populateMinBytes;
  g_populateMinBytes = bytes;
  return previous;
}

typedef struct PopulateAhead {
  char *base;  // page-aligned
  size_t bytes;
  _Atomic size_t written;  // the writer's position, from base
  _Atomic int done;
} PopulateAhead;

static void *populateAhead(void *context) {
  PopulateAhead *p = context;
  size_t populated = 0;
  while (populated < p->bytes && !atomic_load_explicit(&p->done, memory_order_relaxed)) {
    if (populated >= atomic_load_explicit(&p->written, memory_order_relaxed) + POPULATE_WINDOW) {
      struct timespec pause = {0, 100000};
      nanosleep(&pause, NULL);
      continue;
    }
    size_t n = p->bytes - populated < POPULATE_CHUNK ? p->bytes - populated : POPULATE_CHUNK;
    populateBytes(p->base + populated, n);
    populated += n;
  }
  return NULL;
}

// Starts the helper for the listing at `listing` (`bytes` long), through libc's own
// pthread_create: the Time Profiler's interposer would count it as the program's, and its
// first-thread hook would start the recorder's threads while the stop holds the tables. The
// helper starts with every signal blocked; false if it did not start (the writer then takes
// every page itself, as for a small listing).
static bool startPopulating(PopulateAhead *p, pthread_t *thread, void *listing, size_t bytes) {
  typedef int (*Create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
  static Create create;
  if (bytes < g_populateMinBytes || bytes == 0) return false;
  if (!create) create = (Create)dlsym(RTLD_NEXT, "pthread_create");
  if (!create) return false;
  uintptr_t start = (uintptr_t)listing & ~(uintptr_t)4095;
  p->base = (char *)start;
  p->bytes = (uintptr_t)listing + bytes - start;
  atomic_store(&p->written, 0);
  atomic_store(&p->done, 0);
  return CPerfSupport_startQuietThread(create, thread, populateAhead, p);
}

int32_t CPerfAlloc_stop(CPerfAlloc_Error *error) { return CPerfAlloc_stopInto(NULL, 0, error); }

int32_t CPerfAlloc_stopInto(CPerfAlloc_Block *out, uint64_t capacity, CPerfAlloc_Error *error) {
  if (error) memset(error, 0, sizeof(*error));
  int32_t expected = STATE_RUNNING;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY))
    return CPerfSupport_fail(error, CPerfAlloc_ErrorState, "stop without a running session", 0);

  // Holding the tables: no hook is mid-update, frees of tracked blocks wait (so every live
  // object's first word can still be read), and after the flag drops no hook touches a
  // table again. Nothing here may malloc: the guard makes sure.
  t_inHook = 1;
  CPerfSupport_spinLock(&g_markLock);
  atomic_store(&g_fastPath, FAST_NONE);
  tablesHold();
  atomic_store(&g_recording, 0);
  startWatchIfWanted();
  g_stopNs = CPerfSupport_monotonicNs();

  CPerfAlloc_Stats *st = &g_stats;
  uint64_t freedEntries = 0, stackEntries = 0, preLive = 0, preLiveBytes = 0;
  uint32_t tables = atomic_load(&g_tableCount);
  for (uint32_t i = 0; i <= tables; i++) {
    const ThreadTable *x = i < tables ? &g_tables[i] : &g_overflow;
    freedEntries += x->freed.used + (x->freed.lost ? 1 : 0);
    stackEntries += x->byStack.used + (x->byStack.lost ? 1 : 0);
    st->totalAllocations += x->allocations;
    st->totalBytes += x->allocatedBytes;
    st->trackedFrees += x->frees;
    st->lostBlocks += x->lost;
    st->lostFreedKeys += x->freed.lost;
    st->lostStackTotals += x->byStack.lost;
    preLive += x->preLive;
    preLiveBytes += x->preLiveBytes;
  }
  int64_t liveBlocks = 0, liveBytes = 0;
  tablesLive(&liveBlocks, &liveBytes);
  st->liveBlocks = (uint64_t)liveBlocks;
  st->liveBytes = (uint64_t)liveBytes;
  g_blocksOwned = !(out && capacity >= (uint64_t)(liveBlocks > 0 ? liveBlocks : 0));
  if (g_blocksOwned) {
    g_blocksBytes = pageRound((liveBlocks > 0 ? (size_t)liveBlocks : 1) * sizeof(CPerfAlloc_Block));
    g_blocks = mapBytes(g_blocksBytes);
  } else {
    g_blocksBytes = (size_t)capacity * sizeof(CPerfAlloc_Block);
    g_blocks = out;
  }
  g_blocksReleased = 0;
  g_freedBytes = pageRound((freedEntries ? freedEntries : 1) * sizeof(CPerfAlloc_Freed));
  g_freedSnapshot = mapBytes(g_freedBytes);
  g_stackTotalsBytes = pageRound((stackEntries ? stackEntries : 1) * sizeof(CPerfAlloc_Freed));
  g_stackTotals = mapBytes(g_stackTotalsBytes);
  if (g_tracksPreexisting) {
    g_preBlocksBytes = pageRound((preLive ? preLive : 1) * sizeof(CPerfAlloc_Block));
    g_preBlocks = mapBytes(g_preBlocksBytes);
  }
  int mapErrno = errno;

  st->startNs = g_startNs;
  st->stopNs = g_stopNs;
  st->mode = g_mode;
  st->swiftObjectSites = g_objectSiteCount;
  st->threadTables = tables;
  st->lostBlocks += atomic_load(&g_lostLeaves);
  // In address order. Each leaf's pages go once listed: no hook reads a leaf again (the flag
  // is down), and the listing and the leaves are never held whole together (a big heap's peak
  // memory). Released, not unmapped: munmap takes the address space's lock for writing and
  // waited for the helper's populating, which holds it for reading, so the two threads took
  // turns (a 16 M-block listing spent 0.9 s, mostly with one of them waiting). The emptied
  // leaves are unmapped with the rest (unmapAll).
  StopListing listing = {.blockCapacity = (uint64_t)liveBlocks, .preCapacity = preLive};
  PopulateAhead ahead;
  pthread_t helper;
  // The caller's memory only: a listing of the recorder's own is populated a leaf ahead in
  // listAtStop.
  bool populating = g_blocks && !g_blocksOwned &&
                    startPopulating(&ahead, &helper, g_blocks, (size_t)liveBlocks * sizeof(CPerfAlloc_Block));
  shadowSortLeaves();
  uint32_t leaves = atomic_load(&g_leafCount);
  uint64_t topPages = 0, lastTopPage = UINT64_MAX;
  for (uint32_t i = 0; i < leaves; i++) {
    st->blockTableBytes += shadowVisitLeaf(i, listAtStop, &listing);
    uint64_t topPage = g_leafRegions[i] * sizeof(Slot *) / 4096;
    if (topPage != lastTopPage) topPages++;
    lastTopPage = topPage;
    if (g_blocks) shadowReleaseLeaf(i);
    if (populating)
      atomic_store_explicit(&ahead.written, (size_t)((char *)(g_blocks + listing.blocks) - ahead.base),
                            memory_order_relaxed);
  }
  if (populating) {
    atomic_store(&ahead.done, 1);
    pthread_join(helper, NULL);
  }
  st->blockTableBytes += topPages * 4096 + (uint64_t)tables * sizeof(ThreadTable);
  g_blockCount = listing.blocks;
  g_preBlockCount = listing.pre;
  st->preexistingBlocks = listing.pre;
  st->preexistingBytes = preLiveBytes;
  uint64_t f = 0, t = 0;
  for (uint32_t i = 0; i <= tables; i++) {
    const ThreadTable *x = i < tables ? &g_tables[i] : &g_overflow;
    f = snapshotFreed(&x->freed, g_freedSnapshot, f, freedEntries, false);
    t = snapshotFreed(&x->byStack, g_stackTotals, t, stackEntries, true);
  }
  g_freedCount = f;
  g_stackTotalCount = t;
  notePeakLiveBytes(liveBytes);  // the peak, including the final state
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

  tablesRelease(false);
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
  // Hooks that raced with stop found the tables closed and the flag down, and left.
  unmapAll();
  atomic_store(&g_state, STATE_IDLE);
}
