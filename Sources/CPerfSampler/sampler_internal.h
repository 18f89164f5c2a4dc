// What the sampler's C files share (not part of the module's public header).
#ifndef CPERFSAMPLER_INTERNAL_H
#define CPERFSAMPLER_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

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
/// and the periods of CPU time since that thread's previous sample (rounded, with the
/// rounding carried to the next one).
bool perf_source_signal(const siginfo_t *info, uint64_t *cookie, uint32_t *weight);

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
/// Queues the sampler's SIGPROF to `tid` with `cookie` and the periods it stands for.
bool wall_signal(pid_t tid, uint64_t cookie, uint32_t weight);

// MARK: - Thread birth and death (threads.c -> sampler.c)

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

#endif
