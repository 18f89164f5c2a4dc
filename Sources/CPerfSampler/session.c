// Session lifecycle: start and stop, and what a stopped session reports. The Time Profiler's
// sampler: per-thread perf events (POSIX timers where the kernel refuses them) deliver
// SIGPROF to each thread, the handler unwinds into a lock-free mmap arena. Only the parts
// that must be C live in this target.
#include "CPerfSampler.h"

#include "async_chain.h"
#include "deferred.h"
#include "dither.h"
#include "thread_table.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

_Static_assert(sizeof(CPerfSampler_SampleHeader) == 24, "arena record header layout");
_Static_assert(sizeof(CPerfSampler_SampleHeader) % 8 == 0, "frames must stay 8-byte aligned");
_Static_assert(sizeof(CPerfSampler_Config) == 32, "config layout");
_Static_assert(sizeof(CPerfSampler_ThreadInfo) == 88, "thread info layout");
_Static_assert(sizeof(void *) == sizeof(uint64_t), "frames are stored as 64-bit addresses");

// MARK: - State owned by start/stop and the discovery thread

enum { STATE_IDLE = 0, STATE_RUNNING = 1, STATE_STOPPED = 2, STATE_BUSY = 3 };
static _Atomic int32_t g_state = STATE_IDLE;

static int32_t g_handlerReplaced;  // at stop: 0 ours, 1 another handler, 2 SIG_IGN, 3 SIG_DFL
SAMPLER_HIDDEN CPerfSampler_Config g_config;
static uint64_t g_startNs;
static uint64_t g_stopNs;
SAMPLER_HIDDEN size_t g_mappedBytes;

static pthread_t g_discovery;
static bool g_discoveryRunning;
SAMPLER_HIDDEN _Atomic int32_t g_discoveryStop;

// The wall clock's ticker thread (ticker_main).
static pthread_t g_ticker;
static bool g_tickerRunning;

static _Atomic int32_t g_unwinder = -1;  // -1: not set, read PERFHARNESS_UNWINDER at start
static _Atomic int32_t g_ditherSetting = 1;
SAMPLER_HIDDEN bool g_dither;  // this session's (dither.h)

int32_t CPerfSampler_gettid(void) { return (int32_t)syscall(SYS_gettid); }

void CPerfSampler_setUnwinder(int32_t unwinder) { atomic_store(&g_unwinder, unwinder); }

void CPerfSampler_setDither(int32_t dither) { atomic_store(&g_ditherSetting, dither != 0); }

uint64_t CPerfSampler_fastSamples(void) {
  if (!g_hot.tables) return 0;
  uint64_t total = atomic_load(&g_fastSamples);
  int32_t used = atomic_load(&g_recordsUsed);
  for (int32_t i = 0; i < used; i++) total += atomic_load(&g_records[i].fastSamples);
  return total;
}
uint64_t CPerfSampler_unwinderMismatches(void) { return atomic_load(&g_mismatches); }
uint64_t CPerfSampler_rejoinedSamples(void) { return atomic_load(&g_rejoined); }
uint64_t CPerfSampler_deferredSamples(void) { return atomic_load(&g_deferredSamples); }
uint32_t CPerfSampler_cachedRule(uint64_t pc, int32_t interrupted) {
  uint64_t address = rule_address(pc, interrupted != 0);
  return address < RULE_MAX_PC ? rule_lookup(address) : 0;
}
uint64_t CPerfSampler_rangeRules(void) { return atomic_load(&g_rangeRules); }
uint64_t CPerfSampler_asyncChains(void) { return atomic_load(&g_asyncChains); }
uint64_t CPerfSampler_asyncUnread(void) { return atomic_load(&g_asyncUnread); }
uint64_t CPerfSampler_unwindFallbacks(void) { return atomic_load(&g_fallbacks); }
int32_t CPerfSampler_activeUnwinder(void) { return atomic_load(&g_unwinderActive); }

uint32_t CPerfSampler_ownMemory(uint64_t *starts, uint64_t *ends, uint32_t capacity) {
  uint64_t ranges[CPerfSampler_OwnMemoryRanges][2] = {
      {(uint64_t)(uintptr_t)g_tableStorage, (uint64_t)(uintptr_t)g_tableStorage + sizeof(g_tableStorage)},
      {(uint64_t)(uintptr_t)&g_asyncRanges, (uint64_t)(uintptr_t)&g_asyncRanges + sizeof(g_asyncRanges)}};
  uint32_t count = 2;
  if (g_defer) {
    ranges[count][0] = (uint64_t)(uintptr_t)g_defer;
    ranges[count++][1] = (uint64_t)(uintptr_t)g_defer + DEFER_BYTES + DEFER_SLACK;
  }
  uint8_t *arena = atomic_load(&g_arena);
  if (arena) {
    ranges[count][0] = (uint64_t)(uintptr_t)arena;
    ranges[count++][1] = (uint64_t)(uintptr_t)arena + g_mappedBytes;
  }
  for (uint32_t i = 0; i < count && i < capacity; i++) {
    starts[i] = ranges[i][0];
    ends[i] = ranges[i][1];
  }
  return count;
}

// MARK: - Session lifecycle

SAMPLER_HIDDEN void wait_for_handlers(void) {
  while (atomic_load(&g_inflight) != 0) sched_yield();
}

static void free_session(void) {
  uint8_t *arena = atomic_load(&g_arena);
  if (arena) munmap(arena, g_mappedBytes);
  atomic_store(&g_arena, NULL);
  atomic_store(&g_capacity, 0);
  g_mappedBytes = 0;
  free(g_threads);
  g_threads = NULL;
  g_threadCount = g_threadCapacity = 0;
}

static void warm_unwinder(void) {
  // libunwind initializes its address space, its per-thread trace cache (mmap,
  // pthread_once, pthread_setspecific) and its caches of the loaded objects on first
  // use. Doing that here, outside any signal handler, keeps that one-time work out of
  // the handler where an interrupted thread may hold the locks it needs, and keeps the
  // first samples' handler time representative. Threads other than the caller warm up
  // on their first sample (libunwind's allocation there is mmap-based, not malloc).
  void *frames[64];
  (void)unw_backtrace(frames, 64);
}

int32_t CPerfSampler_start(const CPerfSampler_Config *config, CPerfSampler_Error *error) {
  (void)CPerfSupport_fail(error, CPerfSampler_OK, NULL, 0);
  if (!config) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorInvalidClock, "config", 0);
    return CPerfSampler_ErrorInvalidClock;
  }
  if (config->clock != CPerfSampler_ClockCPU && config->clock != CPerfSampler_ClockWall) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorInvalidClock, "clock", 0);
    return CPerfSampler_ErrorInvalidClock;
  }
  if (config->rateHz < CPerfSampler_MinRateHz || config->rateHz > CPerfSampler_MaxRateHz) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorInvalidRate, "rateHz", 0);
    return CPerfSampler_ErrorInvalidRate;
  }
  if (config->maxDepth < CPerfSampler_MinDepth || config->maxDepth > CPerfSampler_MaxDepth) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorInvalidDepth, "maxDepth", 0);
    return CPerfSampler_ErrorInvalidDepth;
  }
  if (config->bufferBytes < CPerfSampler_MinBufferBytes || config->bufferBytes > ((uint64_t)1 << 40)) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorInvalidBuffer, "bufferBytes", 0);
    return CPerfSampler_ErrorInvalidBuffer;
  }

  int32_t expected = STATE_IDLE;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorBusy, "CPerfSampler_start", EBUSY);
    return CPerfSampler_ErrorBusy;
  }

  warm_unwinder();

  int err = install_handler();
  if (err) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorSystem, "sigaction(SIGPROF)", err);
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSampler_ErrorSystem;
  }

  if (!g_hot.tables) {
    (void)madvise(TABLES, TABLES_SPAN, MADV_HUGEPAGE);  // a hint: 4 KB pages otherwise
    g_hot.tables = TABLES;
    g_tablesPopulated = 0;
  }
  populate_tables(HUGE_PAGE_BYTES);
  calibrate_tsc(TABLES);  // before any now_ns of the session

  long page = sysconf(_SC_PAGESIZE);
  size_t bytes = (size_t)((config->bufferBytes + (uint64_t)page - 1) & ~((uint64_t)page - 1));
  void *arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (arena == MAP_FAILED) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorSystem, "mmap(arena)", errno);
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSampler_ErrorSystem;
  }

  g_config = *config;
  // Before any thread is armed: the first periods are drawn then.
  g_dither = atomic_load(&g_ditherSetting) != 0;
  g_mappedBytes = bytes;
  atomic_store(&g_arena, (uint8_t *)arena);
  atomic_store(&g_capacity, config->bufferBytes);
  atomic_store(&g_maxDepth, config->maxDepth);
  atomic_store(&g_used, 0);
  atomic_store(&g_signals, 0);
  atomic_store(&g_lost, 0);
  atomic_store(&g_fallbacks, 0);
  atomic_store(&g_timerFailures, 0);
  atomic_fetch_add(&g_generation, 1);
  g_scanMark = 0;
  g_stopNs = 0;
  atomic_store(&g_discoveryStop, 0);
  g_discoveryRunning = false;

  int32_t unwinder = atomic_load(&g_unwinder);
  if (unwinder < 0) {
    const char *env = getenv("PERFHARNESS_UNWINDER");
    unwinder = !env                            ? UNWINDER_AUTO
               : strcmp(env, "libunwind") == 0 ? UNWINDER_LIBUNWIND
               : strcmp(env, "verify") == 0    ? UNWINDER_VERIFY
                                               : UNWINDER_AUTO;
  }
  if (unwinder < UNWINDER_AUTO || unwinder > UNWINDER_VERIFY) unwinder = UNWINDER_AUTO;
  atomic_store(&g_unwinderActive, unwinder);
  atomic_store(&g_mismatches, 0);
  atomic_store(&g_rejoined, 0);
  atomic_store(&g_rangeRules, 0);
  atomic_store(&g_deferredSamples, 0);
  atomic_store(&g_asyncChains, 0);
  atomic_store(&g_asyncUnread, 0);
  // Published again by discovery, unless this session records physical stacks only.
  atomic_store(&g_executorLow, 0);
  atomic_store(&g_executorHigh, 0);
  atomic_store(&g_taskSlotOffset, 0);
  refresh_async_ranges(true);
  // No handler records now (g_enabled is 0): the tables can be reset without races. The
  // rules are dropped too, in case a library was unloaded since the last session.
  memset((void *)g_rules, 0, sizeof(g_rules));
  atomic_store(&g_fastSamples, 0);

  if (!g_defer) {
    void *defer = mmap(NULL, DEFER_BYTES + DEFER_SLACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (defer != MAP_FAILED) g_defer = defer;  // else: learn in the handler
  } else {
    madvise(g_defer, DEFER_BYTES, MADV_DONTNEED);  // back to zero pages
  }
  atomic_store(&g_deferUsed, 0);
  g_deferDone = 0;
  atomic_store(&g_recordsUsed, 0);
  g_freeRecordCount = 0;
  g_deferPrefaulted = 0;
  g_prefaulted = 0;
  g_prefaultWorks = true;
  prefault_arena();

  g_perfErrno = 0;
  g_perfRefused = false;
  g_handlerReplaced = 0;
  g_startNs = now_ns();
  atomic_store(&g_enabled, 1);
  static pthread_once_t atforkOnce = PTHREAD_ONCE_INIT;
  pthread_once(&atforkOnce, forget_table_in_children);
  pthread_mutex_lock(&g_tableLock);
  g_tableOpen = true;
  pthread_mutex_unlock(&g_tableLock);

  // The first scan runs here, so the calling thread and every thread alive now are
  // sampled from the moment start returns.
  scan(0);
  pid_t self = (pid_t)syscall(SYS_gettid);
  ThreadEntry *me = find_live(self);
  if (!me || me->source == CPerfSampler_SourceAuto) {
    int failure = me ? me->timerErrno : ESRCH;
    atomic_store(&g_enabled, 0);
    close_table();
    wait_for_handlers();
    free_session();
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorSystem, "timer_create(calling thread)", failure);
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSampler_ErrorSystem;
  }

  // The discovery thread starts with every signal blocked (it is never sampled and
  // must not run anyone's handlers).
  sigset_t all, saved;
  sigfillset(&all);
  // The wall clock's ticker first, and its tid known before discovery can see it: it is
  // the sampler's, never sampled or reported.
  g_tickerRunning = false;
  atomic_store(&g_tickerTid, 0);
  if (config->clock == CPerfSampler_ClockWall && config->source == CPerfSampler_SourceAuto) {
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    err = sampler_create_unwatched(&g_ticker, ticker_main, NULL);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (err) {
      atomic_store(&g_enabled, 0);
      close_table();
      wait_for_handlers();
      free_session();
      (void)CPerfSupport_fail(error, CPerfSampler_ErrorSystem, "pthread_create(wall-clock ticker)", err);
      atomic_store(&g_state, STATE_IDLE);
      return CPerfSampler_ErrorSystem;
    }
    g_tickerRunning = true;
    while (atomic_load(&g_tickerTid) == 0) sched_yield();
  }
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  err = sampler_create_unwatched(&g_discovery, discovery_main, NULL);
  pthread_sigmask(SIG_SETMASK, &saved, NULL);
  if (err) {
    if (g_tickerRunning) {
      atomic_store(&g_discoveryStop, 1);
      pthread_join(g_ticker, NULL);
      g_tickerRunning = false;
    }
    atomic_store(&g_enabled, 0);
    close_table();
    wait_for_handlers();
    free_session();
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorSystem, "pthread_create(discovery)", err);
    atomic_store(&g_state, STATE_IDLE);
    return CPerfSampler_ErrorSystem;
  }
  g_discoveryRunning = true;
  atomic_store(&g_state, STATE_RUNNING);
  return CPerfSampler_OK;
}

int32_t CPerfSampler_stop(CPerfSampler_Error *error) {
  (void)CPerfSupport_fail(error, CPerfSampler_OK, NULL, 0);
  int32_t expected = STATE_RUNNING;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) {
    (void)CPerfSupport_fail(error, CPerfSampler_ErrorState, "CPerfSampler_stop (no running session)", 0);
    return CPerfSampler_ErrorState;
  }
  if (g_discoveryRunning) {
    atomic_store(&g_discoveryStop, 1);
    pthread_join(g_discovery, NULL);
    g_discoveryRunning = false;
  }
  if (g_tickerRunning) {
    pthread_join(g_ticker, NULL);  // it stops on g_discoveryStop too
    g_tickerRunning = false;
    atomic_store(&g_tickerTid, 0);  // its tid may be a program thread's next
  }
  // Replaced or ignored by the program since start: its threads' signals went elsewhere.
  struct sigaction current;
  if (sigaction(SIGPROF, NULL, &current) == 0 && current.sa_sigaction != sigprof_handler)
    g_handlerReplaced = current.sa_handler == SIG_IGN ? 2 : current.sa_handler == SIG_DFL ? 3 : 1;
  close_table();
  // Signals already queued may still arrive: the handler ignores them from here on,
  // and the arena stays mapped until release anyway.
  atomic_store(&g_enabled, 0);
  wait_for_handlers();
  drain_deferred(false);
  // Taken after the last handler left, so no sample is stamped later than the stop.
  g_stopNs = now_ns();

  for (size_t i = 0; i < g_threadCount; i++) {
    ThreadEntry *entry = &g_threads[i];
    if (!entry->exited) {
      read_comm(entry->tid, entry->latestName);
      entry->blocksSignal = sampler_blocks_sigprof(entry->tid);
    }
  }
  atomic_store(&g_state, STATE_STOPPED);
  return CPerfSampler_OK;
}

void CPerfSampler_setMuted(int32_t muted) { atomic_store(&g_hot.muted, muted != 0); }

void CPerfSampler_stats(CPerfSampler_Stats *stats) {
  memset(stats, 0, sizeof(*stats));
  if (atomic_load(&g_state) != STATE_STOPPED) return;
  uint64_t used = atomic_load(&g_used);
  uint64_t capacity = atomic_load(&g_capacity);
  stats->startNs = g_startNs;
  stats->stopNs = g_stopNs;
  stats->signalsReceived = atomic_load(&g_signals);
  stats->lostSamples = atomic_load(&g_lost);
  stats->unwindFallbacks = atomic_load(&g_fallbacks);
  stats->usedBytes = used < capacity ? used : capacity;
  stats->timerFailures = atomic_load(&g_timerFailures);
  stats->perfErrno = g_perfErrno;
  stats->handlerReplaced = g_handlerReplaced;
  stats->previousHandler = g_previousKind;
}

const uint8_t *CPerfSampler_arena(void) {
  if (atomic_load(&g_state) != STATE_STOPPED) return NULL;
  return atomic_load(&g_arena);
}

int32_t CPerfSampler_threadCount(void) {
  if (atomic_load(&g_state) != STATE_STOPPED) return 0;
  return (int32_t)g_threadCount;
}

int32_t CPerfSampler_threadAt(int32_t index, CPerfSampler_ThreadInfo *info) {
  if (atomic_load(&g_state) != STATE_STOPPED || index < 0 || (size_t)index >= g_threadCount) return -1;
  ThreadEntry *entry = &g_threads[index];
  memset(info, 0, sizeof(*info));
  info->tid = entry->tid;
  info->isMain = entry->tid == getpid();
  info->exited = entry->exited;
  info->timerFailed = entry->timerFailed;
  memcpy(info->firstName, entry->firstName, 16);
  memcpy(info->latestName, entry->latestName, 16);
  info->source = entry->source;
  info->blocksSignal = entry->blocksSignal;
  info->bornDuring = entry->bornDuring;
  info->cpuKnown = entry->cpuKnown;
  info->cpuNs = entry->cpuNs;
  info->unsignalledNs = entry->unsignalledNs;
  info->unsignalledSyscall = entry->unsignalledSyscall;
  return 0;
}

void CPerfSampler_release(void) {
  int32_t expected = STATE_STOPPED;
  if (!atomic_compare_exchange_strong(&g_state, &expected, STATE_BUSY)) return;
  free_session();
  atomic_store(&g_state, STATE_IDLE);
}
