// Thread birth and death for the Time Profiler: pthread_create is interposed (defined in
// the executable, which exports it, so libraries' calls come here too, as CPerfAlloc does
// for malloc) and every thread starts in a trampoline.
//
// Discovery by reading /proc/self/task every 2-4 ms saw 65-75 of 100 one-millisecond
// threads and none of a thread's first milliseconds; names were read when a thread was
// first seen, usually before it named itself. Here a thread is armed on itself before its
// start routine runs, and at its end (a thread-specific-data destructor, which runs both
// on return and on pthread_exit) its final name, its own CPU clock and its signal mask
// are read on it, where no /proc read can race its exit.
#include "sampler_internal.h"

#include "CPerfAlloc.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <time.h>

// Whether the thread blocks SIGPROF or has one pending (then it blocked it meanwhile), from
// /proc/self/task/<tid>/status.
bool sampler_blocks_sigprof(pid_t tid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[4096];
  ssize_t got = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (got <= 0) return false;
  text[got] = 0;
  const uint64_t bit = 1ull << (SIGPROF - 1);
  bool blocked = false;
  const char *keys[] = {"\nSigPnd:", "\nSigBlk:"};
  for (int k = 0; k < 2; k++) {
    const char *at = strstr(text, keys[k]);
    if (at && (strtoull(at + 8, NULL, 16) & bit)) blocked = true;
  }
  return blocked;
}

// ThreadSanitizer intercepts pthread_create itself (a second definition does not link, and
// it must see every thread start): under it threads are only found by discovery.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CPERFSAMPLER_INTERPOSES 0
#endif
#endif
#ifndef CPERFSAMPLER_INTERPOSES
#define CPERFSAMPLER_INTERPOSES 1
#endif

#if CPERFSAMPLER_INTERPOSES
typedef int (*CreateFunction)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static _Atomic(CreateFunction) g_realCreate;

static CreateFunction real_create(void) {
  CreateFunction function = atomic_load_explicit(&g_realCreate, memory_order_acquire);
  if (!function) {
    function = (CreateFunction)dlsym(RTLD_NEXT, "pthread_create");
    atomic_store_explicit(&g_realCreate, function, memory_order_release);
  }
  return function;
}

// Start routines in flight: a fixed pool, because malloc here would be the program's
// allocation to the Allocations instrument. When it is full a thread starts without the
// trampoline (discovery still finds it).
#define START_SLOTS 1024
typedef struct StartSlot {
  _Atomic int32_t used;
  void *(*start)(void *);
  void *argument;
} StartSlot;
static StartSlot g_startSlots[START_SLOTS];
static _Atomic uint32_t g_nextSlot;

static pthread_key_t g_endKey;
static pthread_once_t g_endKeyOnce = PTHREAD_ONCE_INIT;
static bool g_endKeyReady;

static void thread_ends(void *unused) {
  (void)unused;
  char name[16] = {0};
  (void)prctl(PR_GET_NAME, name);
  struct timespec cpu = {0};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  sigset_t mask, pending;
  sigemptyset(&pending);
  bool blocks = pthread_sigmask(SIG_BLOCK, NULL, &mask) == 0 && sigismember(&mask, SIGPROF) == 1;
  blocks |= sigpending(&pending) == 0 && sigismember(&pending, SIGPROF) == 1;
  sampler_thread_ended(name, (uint64_t)cpu.tv_sec * 1000000000ull + (uint64_t)cpu.tv_nsec, blocks);
  // This hook is where a thread's end is known: the allocation recorder's per-thread table
  // goes to the next thread now (256 of them; a program that starts threads one after
  // another would otherwise run out before the next mark, and every allocation after that
  // takes the shared table's lock).
  CPerfAlloc_threadEnding();
}

static void make_end_key(void) { g_endKeyReady = pthread_key_create(&g_endKey, thread_ends) == 0; }

static void *trampoline(void *argument);

void *CPerfSampler_threadStartFunction(void) { return (void *)trampoline; }

static void *trampoline(void *argument) {
  StartSlot *slot = argument;
  void *(*start)(void *) = slot->start;
  void *startArgument = slot->argument;
  // Cleared, not just released: the pool is a global the leak scan reads as a root, and a
  // start argument left there names memory that is freed and reused, so a leaked block
  // at that address would look held (measured: retainer paths rooted in this table).
  slot->start = NULL;
  slot->argument = NULL;
  atomic_store_explicit(&slot->used, 0, memory_order_release);
  if (g_endKeyReady) (void)pthread_setspecific(g_endKey, (void *)1);
  sampler_thread_born();
  return start(startArgument);
}

static _Atomic(void (*)(void)) g_creationHook;

void CPerfSampler_setThreadCreationHook(void (*hook)(void)) { atomic_store(&g_creationHook, hook); }

int pthread_create(pthread_t *thread, const pthread_attr_t *attributes, void *(*start)(void *), void *argument) {
  CreateFunction create = real_create();
  if (!create) return EAGAIN;
  void (*hook)(void) = atomic_load_explicit(&g_creationHook, memory_order_acquire);
  if (hook) hook();
  pthread_once(&g_endKeyOnce, make_end_key);
  for (int tries = 0; tries < START_SLOTS; tries++) {
    StartSlot *slot = &g_startSlots[atomic_fetch_add_explicit(&g_nextSlot, 1, memory_order_relaxed) % START_SLOTS];
    int32_t expected = 0;
    if (!atomic_compare_exchange_strong(&slot->used, &expected, 1)) continue;
    slot->start = start;
    slot->argument = argument;
    int result = create(thread, attributes, trampoline, slot);
    if (result != 0) {
      slot->start = NULL;
      slot->argument = NULL;
      atomic_store(&slot->used, 0);
    }
    return result;
  }
  return create(thread, attributes, start, argument);
}

int sampler_create_unwatched(pthread_t *thread, void *(*start)(void *), void *argument) {
  CreateFunction create = real_create();
  return create ? create(thread, NULL, start, argument) : EAGAIN;
}
#else
int sampler_create_unwatched(pthread_t *thread, void *(*start)(void *), void *argument) {
  return pthread_create(thread, NULL, start, argument);
}

// Without the interposer no thread creation is seen.
void CPerfSampler_setThreadCreationHook(void (*hook)(void)) { (void)hook; }
#endif
