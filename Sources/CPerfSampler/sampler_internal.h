// What the sampler's C files share (not part of the module's public header).
#ifndef CPERFSAMPLER_INTERNAL_H
#define CPERFSAMPLER_INTERNAL_H

#include "sampler_namespace.h"

#include "CPerfSampler.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

// What is shared between the sampler's files, and nothing else: kept out of the executable's
// exported symbols, and reached without the GOT (RIP-relative), as the static data and
// functions these were before.
#define SAMPLER_HIDDEN __attribute__((visibility("hidden")))

// MARK: - Perf-event sample source (perf_event_source.c)

/// Opens a per-thread software cpu-clock event on `tid` that overflows every 1e9/rateHz
/// ns of the thread's CPU time and signals SIGPROF to that thread alone. The handler
/// knows the signal by its fd and finds `cookie` there. Returns the fd, or -errno with
/// *refused set when perf_event_open itself was refused (paranoid level, seccomp, no
/// perf events), not merely out of fds or locked memory for the ring.
int perf_source_open(pid_t tid, int32_t rateHz, uint64_t cookie, bool *refused);
/// Disables the event and forgets the fd: a signal still pending for it is nobody's.
void perf_source_forget(int fd);
/// Unmaps the ring and closes the fd: only once no handler that may have seen the fd
/// before perf_source_forget is still running (the handler holds g_inflight around it).
void perf_source_release(int fd);
/// The event's count: the thread's CPU time in ns since it was armed (user and kernel).
/// Still readable after the thread has exited. 0 on error.
uint64_t perf_source_count(int fd);
/// Signal handler: whether `info` is an overflow of one of our events; if so, its cookie
/// and the nanoseconds of CPU time since that thread's previous sample (its weight).
bool perf_source_signal(const siginfo_t *info, uint64_t *cookie, uint32_t *weight);

// MARK: - POSIX-timer sample source (timer_source.c)

/// Signal handler, for a timer's signal (SI_TIMER) with our `cookie`: the nanoseconds the
/// sample stands for (its timer's clock since the previous sample); dithered, it re-arms
/// the timer for a drawn period.
uint32_t timer_source_signal(const siginfo_t *info, uint64_t cookie);

/// The table armed the timer with kernel id `id` on `clock` for `cookie`: its signals are
/// weighed on that clock and may re-arm it.
void timer_source_register(int id, uint64_t cookie, clockid_t clock);

/// The table is about to delete the timer: its signals re-arm nothing from now on.
void timer_source_forget(int id);

// MARK: - Wall-clock ticks (wall_ticks.c)

typedef enum WallState {
  WALL_RUNNING = 0,         // running or runnable: a signal interrupts no call
  WALL_BLOCKED_SAFE = 1,    // blocked in a call SA_RESTART restarts transparently
  WALL_BLOCKED_UNSAFE = 2,  // blocked where a handler would make the call fail with EINTR
  WALL_GONE = 3,
} WallState;

/// The thread's state from /proc/self/task/<tid>/stat (and, when blocked, .../syscall),
/// through fds opened on first use and kept (-1: not open yet). *syscallNumber: the call a
/// blocked thread is in.
WallState wall_thread_state(pid_t tid, int *statFd, int *syscallFd, int32_t *syscallNumber);
/// Queues the sampler's SIGPROF to `tid` with `cookie` and the nanoseconds it stands for.
bool wall_signal(pid_t tid, uint64_t cookie, uint32_t weightNs);

// MARK: - Thread birth and death (threads.c -> thread_table.c)

/// A thread created through pthread_create starts: called on it before its start routine.
void sampler_thread_born(void);
/// A thread created through pthread_create ends (its thread-specific data destructors run),
/// with its name, its CPU time and whether it blocks SIGPROF or has one pending.
void sampler_thread_ended(const char name[16], uint64_t cpuNs, bool blocksSignal);

/// Whether another thread blocks SIGPROF or has one pending (then it blocked it meanwhile),
/// from /proc/self/task/<tid>/status.
bool sampler_blocks_sigprof(pid_t tid);

/// The real pthread_create, for the sampler's own thread (never armed, never reported).
int sampler_create_unwatched(pthread_t *thread, void *(*start)(void *), void *argument);

// MARK: - State shared with the signal handler (handler.c)

// Timer signals carry (tid << 32) | COOKIE_MAGIC | generation | record in sigev_value: the
// handler tells its own SIGPROFs (current or earlier session) from anyone else's and
// learns the thread id without a gettid syscall.
// The record is 1 + the index of the thread's ThreadRecord (0: none), so the handler
// finds its thread's state without a lookup.
#define COOKIE_MAGIC            0x5A000000u
#define COOKIE_MAGIC_MASK       0xFF000000u
#define COOKIE_GENERATION_SHIFT 10
#define COOKIE_GENERATION_MASK  0x00FFFC00u
#define COOKIE_RECORD_MASK      0x000003FFu

enum { UNWINDER_AUTO = 0, UNWINDER_LIBUNWIND = 1, UNWINDER_VERIFY = 2 };

// Everything the handler touches on every sample shares one cache line: between two
// samples the profiled code evicts it, and each separate line is a miss (~100 ns).
typedef struct HotState {
  _Atomic int32_t enabled;
  _Atomic int32_t inflight;
  _Atomic uint32_t generation;
  _Atomic int32_t maxDepth;
  uint8_t *_Atomic arena;
  _Atomic uint64_t capacity;
  _Atomic uint64_t used;
  _Atomic uint64_t signals;
  struct Tables *tables;
  _Atomic int32_t unwinderActive;
  _Atomic int32_t muted;
} HotState;
extern SAMPLER_HIDDEN HotState g_hot __attribute__((aligned(64)));
_Static_assert(sizeof(g_hot) <= 64, "handler state fits one cache line");
#define g_enabled        g_hot.enabled
#define g_inflight       g_hot.inflight
#define g_generation     g_hot.generation
#define g_arena          g_hot.arena
#define g_capacity       g_hot.capacity
#define g_maxDepth       g_hot.maxDepth
#define g_used           g_hot.used
#define g_signals        g_hot.signals
#define g_fastSamples    TABLES->fastSamples
#define g_unwinderActive g_hot.unwinderActive
extern SAMPLER_HIDDEN _Atomic uint64_t g_lost;
extern SAMPLER_HIDDEN _Atomic uint64_t g_fallbacks;
extern SAMPLER_HIDDEN _Atomic uint64_t g_mismatches;
extern SAMPLER_HIDDEN int32_t g_previousKind;  // the previous SIGPROF handler: 0 default, 1 a handler, 2 ignored

SAMPLER_HIDDEN void sigprof_handler(int sig, siginfo_t *info, void *context);
/// Installs sigprof_handler (once per process); 0, or errno.
SAMPLER_HIDDEN int install_handler(void);

// Appends a finished record to the arena; false if it does not fit.
static inline bool append_record(int32_t tid, uint32_t weight, uint64_t timestampNs, uint32_t handlerNs,
                                 const uint64_t *frames, uint32_t frameCount) {
  uint8_t *arena = atomic_load_explicit(&g_arena, memory_order_relaxed);
  uint64_t capacity = atomic_load_explicit(&g_capacity, memory_order_relaxed);
  uint64_t size = sizeof(CPerfSampler_SampleHeader) + (uint64_t)frameCount * 8;
  uint64_t offset = atomic_fetch_add_explicit(&g_used, size, memory_order_relaxed);
  if (offset + size > capacity) {
    atomic_fetch_add_explicit(&g_lost, 1, memory_order_relaxed);
    return false;
  }
  CPerfSampler_SampleHeader *record = (CPerfSampler_SampleHeader *)(arena + offset);
  memcpy(record + 1, frames, (size_t)frameCount * 8);
  record->weightNs = weight;
  record->timestampNs = timestampNs;
  record->frameCount = frameCount;
  record->tid = tid;
  record->handlerNs = handlerNs;
  return true;
}

// MARK: - State owned by start/stop and the discovery thread (session.c)

extern SAMPLER_HIDDEN CPerfSampler_Config g_config;
extern SAMPLER_HIDDEN size_t g_mappedBytes;
extern SAMPLER_HIDDEN _Atomic int32_t g_discoveryStop;

/// Returns once no signal handler is running (g_inflight is 0).
SAMPLER_HIDDEN void wait_for_handlers(void);

// MARK: - Discovery thread (discovery.c)

extern SAMPLER_HIDDEN uint64_t g_prefaulted;
extern SAMPLER_HIDDEN bool g_prefaultWorks;
extern SAMPLER_HIDDEN uint64_t g_deferPrefaulted;
extern SAMPLER_HIDDEN size_t g_tablesPopulated;

SAMPLER_HIDDEN void *discovery_main(void *unused);
SAMPLER_HIDDEN void *ticker_main(void *unused);
SAMPLER_HIDDEN void populate_tables(size_t bytes);
SAMPLER_HIDDEN void prefault_arena(void);

#endif
