// CPerfSampler: the Time Profiler's signal-timer sampler (Linux only).
//
// One session at a time per process:
//   CPerfSampler_start -> (samples accumulate) -> CPerfSampler_stop -> read the arena
//   and the thread table -> CPerfSampler_release. Only after release can a new session
//   start. Everything here except the signal handler runs on ordinary threads.
#ifndef CPERFSAMPLER_H
#define CPERFSAMPLER_H

#include "CPerfSupport.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum CPerfSampler_Clock {
  /// Per-thread CPU-time timers: only running threads are sampled.
  CPerfSampler_ClockCPU = 0,
  /// Wall time: ticks to running threads and to threads blocked where the call restarts
  /// transparently (CPerfSampler_SourceWallTicks); with CPerfSampler_SourceTimer,
  /// per-thread CLOCK_MONOTONIC timers (every blocked thread, at the price of EINTR).
  CPerfSampler_ClockWall = 1,
} CPerfSampler_Clock;

/// What delivers the samples.
typedef enum CPerfSampler_Source {
  /// Config: a per-thread cpu-clock perf event where the kernel allows it (CPU clock only),
  /// else a POSIX timer. ThreadInfo: not armed.
  CPerfSampler_SourceAuto = 0,
  /// Per-thread POSIX timers only (timer_create; CPU-time timers fire on kernel ticks).
  CPerfSampler_SourceTimer = 1,
  /// ThreadInfo only: the thread was sampled by its perf event.
  CPerfSampler_SourcePerfEvent = 2,
  /// ThreadInfo only: wall clock, ticks queued by the sampler's ticker thread to threads
  /// that run or are blocked where SA_RESTART restarts the call (never EINTR).
  CPerfSampler_SourceWallTicks = 3,
} CPerfSampler_Source;

enum {
  CPerfSampler_MinRateHz = 1,
  CPerfSampler_MaxRateHz = 10000,
  CPerfSampler_MinDepth = 1,
  /// Frames are captured on the interrupted thread's stack (8 bytes each), so keep
  /// the limit modest: a thread close to its stack limit must survive a sample.
  CPerfSampler_MaxDepth = 1024,
  CPerfSampler_MinBufferBytes = 4096,
};

typedef struct CPerfSampler_Config {
  int32_t clock;               // CPerfSampler_Clock
  int32_t rateHz;              // CPerfSampler_MinRateHz ... CPerfSampler_MaxRateHz
  int32_t maxDepth;            // CPerfSampler_MinDepth ... CPerfSampler_MaxDepth
  int32_t source;              // CPerfSampler_SourceAuto or CPerfSampler_SourceTimer
  uint64_t bufferBytes;        // >= CPerfSampler_MinBufferBytes; reserved with MAP_NORESERVE
  int32_t physicalStacksOnly;  // 1: no logical async chains (the thread's stack only)
  int32_t reserved;
} CPerfSampler_Config;

/// A frame of a Swift task's logical chain has this bit set in the arena: the address
/// without it is a resume function's entry (not a return address); 0 with it is the
/// marker where the executor's frames end and the task's awaiting callers begin.
#define CPerfSampler_AsyncFrameTag (1ull << 62)

typedef enum CPerfSampler_ErrorCode {
  CPerfSampler_OK = 0,
  CPerfSampler_ErrorInvalidClock = 1,
  CPerfSampler_ErrorInvalidRate = 2,
  CPerfSampler_ErrorInvalidDepth = 3,
  CPerfSampler_ErrorInvalidBuffer = 4,
  /// Another session is running (or stopped but not yet released).
  CPerfSampler_ErrorBusy = 5,
  /// A system call failed: `call` names it, `sysErrno` holds errno.
  CPerfSampler_ErrorSystem = 6,
  /// stop/release called in the wrong state.
  CPerfSampler_ErrorState = 7,
} CPerfSampler_ErrorCode;

/// code: a CPerfSampler_ErrorCode.
typedef CPerfSupport_Error CPerfSampler_Error;

/// One record in the arena; `frameCount` frames (uint64_t each) follow it directly.
/// frames[0] is the interrupted PC, the rest are return addresses (leaf first).
/// Records are 8-byte aligned and packed back to back; a record with tid == 0 (or the
/// end of `usedBytes`) ends the arena.
typedef struct CPerfSampler_SampleHeader {
  int32_t tid;
  uint32_t weightNs;     // the time this sample stands for: the thread's CPU time since its
                         // previous sample (perf event: the counter), (1 + si_overrun)
                         // periods (timer), the time since the last tick (wall ticks);
                         // saturates at UINT32_MAX (4.29 s)
  uint64_t timestampNs;  // at handler entry, on the session's clock (see startNs)
  uint32_t handlerNs;    // handler entry to (almost) exit
  uint32_t frameCount;   // >= 1
} CPerfSampler_SampleHeader;

typedef struct CPerfSampler_ThreadInfo {
  int32_t tid;
  int32_t isMain;              // tid == getpid()
  int32_t exited;              // seen gone during recording (its timer was deleted then)
  int32_t timerFailed;         // timer_create failed: the thread was never sampled
  char firstName[16];          // /proc/self/task/<tid>/comm when first seen
  char latestName[16];         // comm read last: on the scan after first sight, when the thread
                               // ended (threads from pthread_create) and at stop
  int32_t source;              // CPerfSampler_SourcePerfEvent, CPerfSampler_SourceTimer, or 0
  int32_t blocksSignal;        // SIGPROF blocked or pending when the thread ended or at stop
  int32_t bornDuring;          // started during the recording
  int32_t cpuKnown;            // cpuNs is known
  uint64_t cpuNs;              // CPU time the recording could have sampled: from the thread's
                               // start (bornDuring) or its arming, to its end or the stop
  uint64_t unsignalledNs;      // wall clock ticks: time blocked where a tick would cause EINTR
  int32_t unsignalledSyscall;  // the system call it was last blocked in so (-1: none)
  int32_t reserved;
} CPerfSampler_ThreadInfo;

typedef struct CPerfSampler_Stats {
  uint64_t startNs;  // CLOCK_MONOTONIC; later times count from it on the TSC when it is invariant
  uint64_t stopNs;
  uint64_t signalsReceived;  // SIGPROFs from this session's timers
  uint64_t lostSamples;      // signals whose sample did not fit in the arena
  uint64_t unwindFallbacks;  // interrupted PC not found among unwound frames
  uint64_t usedBytes;        // valid bytes at the start of the arena
  uint64_t timerFailures;    // timer_create/timer_settime failures (not ESRCH/EINVAL)
  int32_t perfErrno;         // first perf_event_open/ring failure's errno (threads got timers)
  int32_t handlerReplaced;   // SIGPROF at stop: 0 ours, 1 another handler, 2 ignored, 3 default
  int32_t previousHandler;   // SIGPROF before the sampler's: 0 default, 1 a handler, 2 ignored
  int32_t reserved;
} CPerfSampler_Stats;

/// Starts a session. Returns 0, or an error code with details in *error.
/// Warms libunwind on the calling thread, arms the calling thread (and every other
/// current thread) before returning, then a discovery thread arms new threads.
int32_t CPerfSampler_start(const CPerfSampler_Config *config, CPerfSampler_Error *error);

/// Stops sampling: joins the discovery thread, deletes every timer, disables the
/// handler and waits for in-flight handlers. After it, the arena is immutable.
int32_t CPerfSampler_stop(CPerfSampler_Error *error);

/// While muted (any session, until unmuted), the handler records nothing: a tick that
/// lands then is neither a sample nor a loss. For the harness's own work inside a
/// recording (setting up the other instruments, a leak check), which is not the program's.
void CPerfSampler_setMuted(int32_t muted);

/// A thread of the harness's own that the sampler never arms or reports (the preloaded
/// recorder's marker and crash-reporter threads), for every session until unignored.
/// The thread must not have been started through the pthread_create interposer, which
/// arms at birth. Returns 0, or -1 when four threads are ignored already.
int32_t CPerfSampler_ignoreThread(int32_t tid);
void CPerfSampler_unignoreThread(int32_t tid);

/// Called on the creating thread before every thread the pthread_create interposer starts
/// (NULL: none): the preloaded recorder starts its own threads when the program starts its
/// first, since glibc's malloc is in its multi-threaded mode from then on anyway.
void CPerfSampler_setThreadCreationHook(void (*hook)(void));

/// Valid only between stop and release.
void CPerfSampler_stats(CPerfSampler_Stats *stats);
const uint8_t *CPerfSampler_arena(void);
int32_t CPerfSampler_threadCount(void);
int32_t CPerfSampler_threadAt(int32_t index, CPerfSampler_ThreadInfo *info);

/// Frees the arena and the thread table; a new session may start afterwards.
void CPerfSampler_release(void);

/// The sampler's own memory that holds words copied from the sampled threads: its tables
/// (each thread's last walk keeps the rbp it met in every frame, which code built without
/// frame pointers uses for data, such as a heap address), the deferred samples' copies of
/// registers and stacks, the sample arena, and the writable mappings an async context may
/// be read from (their bounds as last read: the heap's old end lies inside a block once
/// the heap grows). Writes up to `capacity` ranges (CPerfSampler_OwnMemoryRanges at most)
/// as [starts[i], ends[i]) and returns how many there are. A leak scan reads none of them
/// as a root: what they hold is no reference of the program's.
uint32_t CPerfSampler_ownMemory(uint64_t *starts, uint64_t *ends, uint32_t capacity);
enum { CPerfSampler_OwnMemoryRanges = 4 };

/// Which unwinder the handler uses, read at the next CPerfSampler_start:
///   0 auto (default): the fast path (per-PC unwind rules learned from libunwind, cached
///     process-wide, applied to the interrupted stack within its mapped bounds), falling
///     back to unw_backtrace for a sample it cannot walk (e.g. the first samples of a
///     thread, before its stack bounds are known);
///   1 libunwind: unw_backtrace for every sample;
///   2 verify: both; the recorded stack is libunwind's, and every sample where the two
///     differ is counted (CPerfSampler_unwinderMismatches). For tests and diagnosis.
/// Without a call, the PERFHARNESS_UNWINDER environment variable (auto, libunwind,
/// verify) decides; pass -1 to go back to that.
void CPerfSampler_setUnwinder(int32_t unwinder);
/// Whether the next sessions dither their sampling periods (1, the default): each thread's
/// next sample comes after a period drawn uniformly from 0.5-1.5 times 1/rateHz, so work
/// that repeats at the sampling period is not sampled at one phase of it. 0: fixed
/// periods, to show what that costs in accuracy.
void CPerfSampler_setDither(int32_t dither);
/// Samples of the last session (or the running one) unwound by the fast path, and in
/// verify mode, how many of those differed from libunwind.
uint64_t CPerfSampler_fastSamples(void);
uint64_t CPerfSampler_unwinderMismatches(void);
/// Samples of the last session that met a PC without a rule and were finished from the
/// thread's previous walk (only the stack up to a caller frame it still held was copied).
uint64_t CPerfSampler_rejoinedSamples(void);
/// Samples of the last session that met a PC without a rule and were finished outside the
/// handler, on a copy of the stack (the ones above included).
uint64_t CPerfSampler_deferredSamples(void);
/// Rule cache entries of the last session given from the range of the CFI row that a rule
/// learned on a stack copy holds in (a whole 16-byte granule, or one address, each); only
/// free entries are given.
uint64_t CPerfSampler_rangeRules(void);
/// The rule cache's entry for a frame whose PC is pc (a return address for a caller frame):
/// nonzero while the cache holds a rule for it. Kept from the last session until the next
/// starts. For the sampler's tests.
uint32_t CPerfSampler_cachedRule(uint64_t pc, int32_t interrupted);
/// Samples of the last session (or the running one) whose stack came out short of what
/// the unwinder could see (unwindFallbacks in CPerfSampler_Stats), readable after release.
uint64_t CPerfSampler_unwindFallbacks(void);
/// Samples of the last session (or the running one) given a Swift task's logical chain,
/// and samples with a frame the executor called whose context the walk could not read
/// (no frame record there, or a context outside the mappings last read).
uint64_t CPerfSampler_asyncChains(void);
uint64_t CPerfSampler_asyncUnread(void);
/// The unwinder the last (or running) session used: 0 auto, 1 libunwind, 2 verify.
int32_t CPerfSampler_activeUnwinder(void);

/// Whether this process may open a cpu-clock perf event on itself with a ring (the
/// CPU clock's primary sample source); else sessions use timers.
int32_t CPerfSampler_perfEventsAvailable(void);

/// The kernel thread id of the calling thread (tests filter samples by it).
int32_t CPerfSampler_gettid(void);

/// The function every thread started through the pthread_create interposer begins in: the
/// bottom of its stack is the recorder's code without the thread standing inside it.
void *CPerfSampler_threadStartFunction(void);
/// Now on the clock of samples' timestamps and of startNs/stopNs: CLOCK_MONOTONIC's
/// scale, read from the TSC after a session's start when the TSC is invariant.
uint64_t CPerfSampler_nowNs(void);

#ifdef __cplusplus
}
#endif

#endif
