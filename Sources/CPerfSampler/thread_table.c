// The table of sampled threads: each thread's sampling source armed and disarmed, as
// scanning /proc/self/task finds threads and as threads.c's hooks see them start and end.
#include "thread_table.h"

#include "walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

// The kernel's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): another thread's CPU clock.
// Computed unsigned because shifting a negative int is undefined in C.
#define THREAD_CPUCLOCK(tid) ((clockid_t)((((uint32_t) ~(uint32_t)(tid)) << 3) | 6u))

// MARK: - State owned by start/stop and the discovery thread

// The thread table and its lock (see thread_table.h).
SAMPLER_HIDDEN pthread_mutex_t g_tableLock = PTHREAD_MUTEX_INITIALIZER;
SAMPLER_HIDDEN ThreadEntry *g_threads;
SAMPLER_HIDDEN size_t g_threadCount;
SAMPLER_HIDDEN size_t g_threadCapacity;
SAMPLER_HIDDEN uint64_t g_scanMark;
SAMPLER_HIDDEN _Atomic uint64_t g_timerFailures;
// errno of the first refused perf_event_open this session (0: none): the reason threads
// were given timers instead.
SAMPLER_HIDDEN int g_perfErrno;
SAMPLER_HIDDEN _Atomic pid_t g_ignoredTids[IGNORED_THREADS_MAX];  // CPerfSampler_ignoreThread's; 0: free
SAMPLER_HIDDEN _Atomic pid_t g_tickerTid;  // the wall clock's ticker thread while it runs, else 0
SAMPLER_HIDDEN _Atomic bool g_tableOpen;   // threads may be added (start to stop), under g_tableLock
SAMPLER_HIDDEN bool g_perfRefused;         // perf_event_open is refused outright: timers from here on

// MARK: - Thread discovery

// Reads /proc/self/task/<tid>/comm into out; leaves out untouched if the thread is gone.
SAMPLER_HIDDEN void read_comm(pid_t tid, char out[16]) {
  char path[64];
  const char *prefix = "/proc/self/task/";
  size_t n = strlen(prefix);
  memcpy(path, prefix, n);
  char digits[16];
  int d = 0;
  unsigned value = (unsigned)tid;
  do {
    digits[d++] = (char)('0' + value % 10);
    value /= 10;
  } while (value && d < (int)sizeof(digits));
  while (d) path[n++] = digits[--d];
  memcpy(path + n, "/comm", 6);

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char name[16] = {0};
  ssize_t got = read(fd, name, 15);
  close(fd);
  if (got <= 0) return;
  if (name[got - 1] == '\n') name[got - 1] = 0;
  memcpy(out, name, 16);
}

SAMPLER_HIDDEN ThreadEntry *find_live(pid_t tid) {
  for (size_t i = 0; i < g_threadCount; i++)
    if (g_threads[i].tid == tid && !g_threads[i].exited) return &g_threads[i];
  return NULL;
}

static uint64_t thread_cpu_ns(pid_t tid, bool *known) {
  struct timespec ts;
  *known = clock_gettime(THREAD_CPUCLOCK(tid), &ts) == 0;
  return *known ? (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec : 0;
}

// The perf event first (it keeps the requested rate); a timer where perf events are refused
// (perf_event_paranoid 3, seccomp in containers) or run out (fds, locked memory).
static bool arm_perf(ThreadEntry *entry, uint64_t cookie) {
  if (g_config.source != CPerfSampler_SourceAuto || g_perfRefused) return false;
  bool refused = false;
  int fd = perf_source_open(entry->tid, g_config.rateHz, cookie, &refused);
  if (fd >= 0) {
    entry->perfFd = fd;
    entry->source = CPerfSampler_SourcePerfEvent;
    return true;
  }
  if (-fd == ESRCH) {
    // Gone, but /proc can list it until its exit completes: not a new thread if seen there.
    entry->exited = true;
    entry->lingering = true;
    return true;  // nothing to arm
  }
  if (!g_perfErrno) g_perfErrno = -fd;
  // Refused outright (not just out of fds or locked memory): no use asking per thread.
  g_perfRefused |= refused;
  return false;
}

static ThreadEntry *find_lingering(pid_t tid) {
  for (size_t i = 0; i < g_threadCount; i++)
    if (g_threads[i].tid == tid && g_threads[i].lingering) return &g_threads[i];
  return NULL;
}

static void arm(ThreadEntry *entry) {
  entry->perfFd = -1;
  entry->statFd = -1;
  entry->syscallFd = -1;
  entry->unsignalledSyscall = -1;
  bool known;
  entry->cpuAtArmNs = thread_cpu_ns(entry->tid, &known);
  struct sigevent event;
  memset(&event, 0, sizeof(event));
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = SIGPROF;
  event._sigev_un._tid = entry->tid;
  entry->record = atomic_load(&g_unwinderActive) == UNWINDER_LIBUNWIND ? -1 : claim_record(entry->tid);
  uint64_t cookie = ((uint64_t)(uint32_t)entry->tid << 32) | COOKIE_MAGIC |
                    ((atomic_load(&g_generation) << COOKIE_GENERATION_SHIFT) & COOKIE_GENERATION_MASK) |
                    (uint32_t)(entry->record + 1);
  event.sigev_value.sival_ptr = (void *)(uintptr_t)cookie;
  if (g_config.clock == CPerfSampler_ClockWall && g_config.source == CPerfSampler_SourceAuto) {
    // Running, it is sampled by its cpu-clock event, whose signals arrive in user code and
    // so interrupt no call; blocked, by the ticker (wall_ticks.c).
    (void)arm_perf(entry, cookie);
    entry->cookie = cookie;
    entry->source = CPerfSampler_SourceWallTicks;
    return;
  }
  if (arm_perf(entry, cookie)) {
    if (entry->exited) {
      release_record(entry->record);
      entry->record = -1;
    }
    return;
  }
  clockid_t clock = g_config.clock == CPerfSampler_ClockWall ? CLOCK_MONOTONIC : THREAD_CPUCLOCK(entry->tid);

  timer_t timer;
  if (timer_create(clock, &event, &timer) != 0) {
    int err = errno;
    // EINVAL/ESRCH: the thread exited between the scan and here.
    if (err == EINVAL || err == ESRCH) {
      entry->exited = true;
    } else {
      entry->timerFailed = true;
      entry->timerErrno = err;
      atomic_fetch_add(&g_timerFailures, 1);
    }
    release_record(entry->record);
    entry->record = -1;
    return;
  }
  long period = 1000000000L / g_config.rateHz;
  struct itimerspec spec = {
      .it_interval = {.tv_sec = period / 1000000000L, .tv_nsec = period % 1000000000L},
      .it_value = {.tv_sec = period / 1000000000L, .tv_nsec = period % 1000000000L},
  };
  if (timer_settime(timer, 0, &spec, NULL) != 0) {
    entry->timerFailed = true;
    entry->timerErrno = errno;
    atomic_fetch_add(&g_timerFailures, 1);
    timer_delete(timer);
    release_record(entry->record);
    entry->record = -1;
    return;
  }
  entry->timer = timer;
  entry->hasTimer = true;
  entry->source = CPerfSampler_SourceTimer;
  // glibc's timer_t of a SIGEV_THREAD_ID timer is the kernel's id, which signals carry.
  timer_source_register((int)(intptr_t)timer, cookie, clock);
}

// The CPU time the recording could have sampled: from the thread's start if it started
// during the recording, else from when it was armed.
static void note_cpu_time(ThreadEntry *entry) {
  if (entry->cpuKnown) return;
  uint64_t base = entry->bornDuring ? 0 : entry->cpuAtArmNs;
  bool known;
  uint64_t now = thread_cpu_ns(entry->tid, &known);
  if (!known && entry->perfFd >= 0) {
    // Gone already: its event still holds the CPU time since it was armed.
    uint64_t counted = perf_source_count(entry->perfFd);
    now = entry->cpuAtArmNs + counted;
    known = counted > 0;
  }
  if (known && now >= base) {
    entry->cpuNs = now - base;
    entry->cpuKnown = true;
  }
}

// One thread's sampling source off; for stop, `wait` false and one wait for them all.
static void disarm_one(ThreadEntry *entry, bool wait) {
  if (entry->source == CPerfSampler_SourceWallTicks) {
    if (entry->statFd >= 0) close(entry->statFd);
    if (entry->syscallFd >= 0) close(entry->syscallFd);
    entry->statFd = entry->syscallFd = -1;
    entry->cookie = 0;
  }
  if (entry->hasTimer) {
    // A handler that saw the timer registered re-arms it: forgotten, then no handler left in
    // flight, then deleted, so its id is never re-armed once the program may hold it.
    timer_source_forget((int)(intptr_t)entry->timer);
    if (wait) {
      wait_for_handlers();
      timer_delete(entry->timer);  // errors ignored: nothing left to do about them
      entry->hasTimer = false;
    }
  }
  if (entry->perfFd >= 0) {
    perf_source_forget(entry->perfFd);
    if (wait) {
      wait_for_handlers();
      perf_source_release(entry->perfFd);
      entry->perfFd = -1;
    }
  }
}

static void disarm(ThreadEntry *entry) {
  note_cpu_time(entry);
  disarm_one(entry, true);
}

static ThreadEntry *add_thread(pid_t tid, bool bornDuring) {
  if (g_threadCount == g_threadCapacity) {
    size_t capacity = g_threadCapacity ? g_threadCapacity * 2 : 64;
    ThreadEntry *grown = realloc(g_threads, capacity * sizeof(ThreadEntry));
    if (!grown) return NULL;
    g_threads = grown;
    g_threadCapacity = capacity;
  }
  ThreadEntry *entry = &g_threads[g_threadCount++];
  memset(entry, 0, sizeof(*entry));
  entry->tid = tid;
  entry->mark = g_scanMark;
  entry->bornDuring = bornDuring;
  read_comm(tid, entry->firstName);
  arm(entry);
  return entry;
}

// Arms every thread not seen before; deletes the timers of threads that are gone, so a
// recycled tid is treated as a new thread.
// Returns whether a thread appeared or went.
static bool is_ignored(pid_t tid) {
  for (int i = 0; i < IGNORED_THREADS_MAX; i++) {
    if (atomic_load_explicit(&g_ignoredTids[i], memory_order_relaxed) == tid) return true;
  }
  return false;
}

SAMPLER_HIDDEN bool scan(pid_t exclude) {
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return false;
  pthread_mutex_lock(&g_tableLock);
  bool changed = false;
  g_scanMark++;
  struct dirent *item;
  while ((item = readdir(dir)) != NULL) {
    if (item->d_name[0] < '0' || item->d_name[0] > '9') continue;
    pid_t tid = (pid_t)strtol(item->d_name, NULL, 10);
    if (tid <= 0 || tid == exclude || tid == atomic_load_explicit(&g_tickerTid, memory_order_relaxed) ||
        is_ignored(tid))
      continue;
    ThreadEntry *entry = find_live(tid);
    ThreadEntry *ending = entry ? NULL : find_lingering(tid);
    if (ending) {
      ending->mark = g_scanMark;  // the same thread on its way out, not a new one
    } else if (entry) {
      entry->mark = g_scanMark;
      // A new thread usually names itself right after it starts, after the scan that
      // found it (it inherits its creator's name until then): look once more.
      if (!entry->nameRefreshed) {
        entry->nameRefreshed = true;
        read_comm(tid, entry->latestName);
      }
    } else {
      // Found after the first scan: it started during the recording (or just before it
      // and was missed, which only undercounts its coverage).
      add_thread(tid, g_scanMark > 1);
      changed = true;
    }
  }
  closedir(dir);
  for (size_t i = 0; i < g_threadCount; i++) {
    ThreadEntry *entry = &g_threads[i];
    if (entry->lingering && entry->mark != g_scanMark) entry->lingering = false;
    if (!entry->exited && entry->mark != g_scanMark) {
      entry->exited = true;
      disarm(entry);
      release_record(entry->record);
      entry->record = -1;
      changed = true;
    }
  }
  pthread_mutex_unlock(&g_tableLock);
  return changed;
}

// MARK: - Session lifecycle: the table's part

static void teardown_timers(void) {
  for (size_t i = 0; i < g_threadCount; i++) {
    if (!g_threads[i].exited) note_cpu_time(&g_threads[i]);
    disarm_one(&g_threads[i], false);
  }
  wait_for_handlers();
  for (size_t i = 0; i < g_threadCount; i++) {
    if (g_threads[i].perfFd >= 0) perf_source_release(g_threads[i].perfFd);
    g_threads[i].perfFd = -1;
    if (g_threads[i].hasTimer) timer_delete(g_threads[i].timer);
    g_threads[i].hasTimer = false;
  }
}

// Threads can no longer be added (by threads.c's hooks), and every thread's sampling
// source is off.
SAMPLER_HIDDEN void close_table(void) {
  pthread_mutex_lock(&g_tableLock);
  g_tableOpen = false;
  teardown_timers();
  pthread_mutex_unlock(&g_tableLock);
}

// A forked child keeps none of the recording (its threads are other tids, and no discovery
// thread runs in it), but inherits the table's lock in whatever state another thread held it
// at the fork: its first pthread_create would wait on it forever.
static void forget_table_in_child(void) {
  atomic_store(&g_tableOpen, false);
  pthread_mutex_init(&g_tableLock, NULL);
}

SAMPLER_HIDDEN void forget_table_in_children(void) { (void)pthread_atfork(NULL, NULL, forget_table_in_child); }

void sampler_thread_born(void) {
  if (!atomic_load_explicit(&g_tableOpen, memory_order_relaxed)) return;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  pthread_mutex_lock(&g_tableLock);
  // The caller is new: an ended thread's entry with its tid is a recycled tid's.
  ThreadEntry *stale = find_lingering(tid);
  if (stale) stale->lingering = false;
  if (g_tableOpen && !find_live(tid)) (void)add_thread(tid, true);
  pthread_mutex_unlock(&g_tableLock);
}

void sampler_thread_ended(const char name[16], uint64_t cpuNs, bool blocksSignal) {
  pid_t tid = (pid_t)syscall(SYS_gettid);
  pthread_mutex_lock(&g_tableLock);
  ThreadEntry *entry = g_tableOpen ? find_live(tid) : NULL;
  if (entry) {
    memcpy(entry->latestName, name, 16);
    entry->latestName[15] = 0;
    entry->blocksSignal = blocksSignal;
    uint64_t base = entry->bornDuring ? 0 : entry->cpuAtArmNs;
    if (cpuNs >= base) {
      entry->cpuNs = cpuNs - base;
      entry->cpuKnown = true;
    }
    entry->ended = true;
    entry->lingering = true;
    entry->exited = true;
    disarm_one(entry, true);
    release_record(entry->record);
    entry->record = -1;
  }
  pthread_mutex_unlock(&g_tableLock);
}

int32_t CPerfSampler_ignoreThread(int32_t tid) {
  for (int i = 0; i < IGNORED_THREADS_MAX; i++) {
    pid_t expected = 0;
    if (atomic_compare_exchange_strong(&g_ignoredTids[i], &expected, (pid_t)tid)) return 0;
  }
  return -1;
}

void CPerfSampler_unignoreThread(int32_t tid) {
  for (int i = 0; i < IGNORED_THREADS_MAX; i++) {
    pid_t expected = (pid_t)tid;
    atomic_compare_exchange_strong(&g_ignoredTids[i], &expected, 0);
  }
}
