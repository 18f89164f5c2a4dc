// The table of sampled threads (thread_table.c): an entry per thread, its sampling source
// armed and disarmed.
#ifndef CPERFSAMPLER_THREAD_TABLE_H
#define CPERFSAMPLER_THREAD_TABLE_H

#include "sampler_internal.h"

#include <time.h>

typedef struct ThreadEntry {
  pid_t tid;
  timer_t timer;
  bool hasTimer;
  bool exited;
  bool timerFailed;
  int timerErrno;
  uint64_t mark;
  char firstName[16];
  char latestName[16];
  bool nameRefreshed;
  int32_t record;   // index into the ThreadRecords while armed, -1: none
  int perfFd;       // the thread's cpu-clock event while armed, -1: none
  int32_t source;   // CPerfSampler_Source that sampled it
  bool bornDuring;  // started during the recording: its CPU time counts from 0
  bool ended;       // its end was seen on it (pthread_create threads)
  bool lingering;   // ended, but still listed in /proc until its exit completes
  bool cpuKnown;
  bool blocksSignal;
  uint64_t cpuAtArmNs;  // the thread's CPU clock when it was armed
  uint64_t cpuNs;       // its CPU time during the recording, once known
  // Wall-clock ticks (wall_ticks.c): its cookie, its /proc files, and the wall time it
  // spent where a tick would have made its call return EINTR.
  uint64_t cookie;
  int statFd;
  int syscallFd;
  uint64_t unsignalledNs;
  int32_t unsignalledSyscall;
} ThreadEntry;

// Guards the thread table and the thread records' free list: the discovery thread, start
// and stop, and threads starting and ending (threads.c) change them. Never the handler.
extern SAMPLER_HIDDEN pthread_mutex_t g_tableLock;
extern SAMPLER_HIDDEN ThreadEntry *g_threads;
extern SAMPLER_HIDDEN size_t g_threadCount;
extern SAMPLER_HIDDEN size_t g_threadCapacity;
extern SAMPLER_HIDDEN uint64_t g_scanMark;
extern SAMPLER_HIDDEN _Atomic uint64_t g_timerFailures;
extern SAMPLER_HIDDEN int g_perfErrno;  // the first refused perf_event_open's errno this session
enum { IGNORED_THREADS_MAX = 4 };
extern SAMPLER_HIDDEN _Atomic pid_t g_ignoredTids[IGNORED_THREADS_MAX];  // CPerfSampler_ignoreThread's; 0: free
extern SAMPLER_HIDDEN _Atomic pid_t g_tickerTid;  // the wall clock's ticker thread while it runs, else 0
extern SAMPLER_HIDDEN _Atomic bool g_tableOpen;   // threads may be added (start to stop), under g_tableLock
extern SAMPLER_HIDDEN bool g_perfRefused;         // perf_event_open is refused outright: timers from here on

/// Reads /proc/self/task/<tid>/comm into out; leaves out untouched if the thread is gone.
SAMPLER_HIDDEN void read_comm(pid_t tid, char out[16]);
SAMPLER_HIDDEN ThreadEntry *find_live(pid_t tid);
/// Arms every thread not seen before, disarms those gone; whether a thread appeared or went.
SAMPLER_HIDDEN bool scan(pid_t exclude);
/// Threads can no longer be added, and every thread's sampling source is off.
SAMPLER_HIDDEN void close_table(void);
SAMPLER_HIDDEN void forget_table_in_children(void);

#endif
