// The sampler's own threads: the discovery thread (threads found, stack bounds resolved,
// deferred samples finished, pages faulted in ahead of handlers) and the wall clock's ticker.
#include "async_chain.h"
#include "deferred.h"
#include "dither.h"
#include "thread_table.h"

#include "CPerfAlloc.h"

#include <elfutils/libdwfl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DISCOVERY_INTERVAL_NS 2000000L
// A new thread runs unsampled until discovery sees it: a short cap keeps Dispatch's
// short-lived workers in the profile at the price of a little more /proc scanning.
#define DISCOVERY_MAX_INTERVAL_NS 4000000L

// MARK: - Thread discovery

// Discovery thread: finds the stack mapping of every thread whose handler asked for it.
static void resolve_stacks(void) {
  if (!atomic_exchange(&g_boundsWanted, 0)) return;
  bool needed = false;
  int32_t used = atomic_load(&g_recordsUsed);
  for (int i = 0; i < used && !needed; i++) {
    ThreadRecord *slot = &g_records[i];
    if (!atomic_load(&slot->tid)) continue;
    uint64_t r = atomic_load(&slot->lastRsp);
    uint64_t hi = atomic_load(&slot->high), lo = atomic_load(&slot->low);
    if (r && (hi == 0 || r < lo || r >= hi)) needed = true;
  }
  if (!needed) return;
  // One pass over the mappings: each record whose stack pointer lies in a writable one
  // takes its bounds.
  CPerfSupport_MapsReader reader;
  if (!CPerfSupport_mapsOpen(&reader)) return;
  CPerfSupport_Mapping mapping;
  while (CPerfSupport_mapsNext(&reader, &mapping)) {
    if (!mapping.readable || !mapping.writable) continue;
    for (int i = 0; i < used; i++) {
      ThreadRecord *slot = &g_records[i];
      if (!atomic_load(&slot->tid)) continue;
      uint64_t r = atomic_load(&slot->lastRsp);
      uint64_t hi = atomic_load(&slot->high), lo = atomic_load(&slot->low);
      if (!r || (hi && r >= lo && r < hi)) continue;
      if (r >= mapping.start && r < mapping.end) {
        atomic_store(&slot->high, 0);
        atomic_store(&slot->low, mapping.start);
        atomic_store(&slot->high, mapping.end);
      }
    }
  }
  CPerfSupport_mapsClose(&reader);
}

// Faults arena pages in ahead of the handler (a first write to a fresh anonymous page
// costs the handler a page fault, ~1 µs, every few samples). MADV_POPULATE_WRITE
// (Linux 5.14+) maps the pages writable without touching their contents, so it is safe
// while handlers write records; on older kernels it fails and nothing changes.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define ARENA_PREFAULT_BYTES (1u << 20)
SAMPLER_HIDDEN uint64_t g_prefaulted;  // arena bytes populated so far (start/discovery only)
SAMPLER_HIDDEN bool g_prefaultWorks;

SAMPLER_HIDDEN uint64_t g_deferPrefaulted;

SAMPLER_HIDDEN size_t g_tablesPopulated;  // bytes of Tables faulted in (start/discovery only)

// Faults in the tables up to `bytes` (rounded to a huge page), so handlers do not.
SAMPLER_HIDDEN void populate_tables(size_t bytes) {
  if (bytes > sizeof(Tables)) bytes = sizeof(Tables);
  if (bytes <= g_tablesPopulated) return;
  size_t to = (bytes + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1);
  if (to > sizeof(Tables)) to = (sizeof(Tables) + 4095) & ~(size_t)4095;
  if (madvise((uint8_t *)g_hot.tables + g_tablesPopulated, to - g_tablesPopulated, MADV_POPULATE_WRITE) == 0)
    g_tablesPopulated = to;
}

// The same for the defer buffer (samples copied there are ~10-20 KB each).
static void prefault_defer(void) {
  if (!g_prefaultWorks || !g_defer) return;
  uint64_t limit = atomic_load(&g_deferUsed) + ARENA_PREFAULT_BYTES;
  if (limit > DEFER_BYTES) limit = DEFER_BYTES;
  if (limit <= g_deferPrefaulted) return;
  uint64_t to = (limit + ARENA_PREFAULT_BYTES - 1) & ~(uint64_t)(ARENA_PREFAULT_BYTES - 1);
  if (to > DEFER_BYTES) to = DEFER_BYTES;
  if (madvise(g_defer + g_deferPrefaulted, (size_t)(to - g_deferPrefaulted), MADV_POPULATE_WRITE) != 0) return;
  g_deferPrefaulted = to;
}

SAMPLER_HIDDEN void prefault_arena(void) {
  prefault_defer();
  if (!g_prefaultWorks) return;
  uint8_t *arena = atomic_load(&g_arena);
  uint64_t limit = atomic_load(&g_used) + ARENA_PREFAULT_BYTES;
  if (limit > g_mappedBytes) limit = g_mappedBytes;
  if (!arena || limit <= g_prefaulted) return;
  uint64_t from = g_prefaulted, to = (limit + ARENA_PREFAULT_BYTES - 1) & ~(uint64_t)(ARENA_PREFAULT_BYTES - 1);
  if (to > g_mappedBytes) to = g_mappedBytes;
  if (madvise(arena + from, (size_t)(to - from), MADV_POPULATE_WRITE) != 0) {
    g_prefaultWorks = false;
    return;
  }
  g_prefaulted = to;
}

SAMPLER_HIDDEN void *discovery_main(void *unused) {
  (void)unused;
  // This thread's reads of /proc (opendir, the maps buffer) are the harness's allocations,
  // not the profiled program's.
  (void)CPerfAlloc_setIgnoringAllocations(1);
  pid_t self = (pid_t)syscall(SYS_gettid);
  // Each round costs the profiled process some CPU (a /proc directory read at least), so
  // while the threads stay the same and nothing waits for this thread, the interval
  // doubles up to DISCOVERY_MAX_INTERVAL_NS; any change brings it back to the minimum.
  long intervalNs = DISCOVERY_INTERVAL_NS;
  while (!atomic_load(&g_discoveryStop)) {
    const struct timespec interval = {.tv_sec = 0, .tv_nsec = intervalNs};
    nanosleep(&interval, NULL);
    if (atomic_load(&g_discoveryStop)) break;
    bool changed = scan(self);
    changed |= atomic_load_explicit(&g_boundsWanted, memory_order_relaxed) != 0;
    changed |= drain_deferred(true);
    intervalNs = changed                                      ? DISCOVERY_INTERVAL_NS
                 : intervalNs * 2 > DISCOVERY_MAX_INTERVAL_NS ? DISCOVERY_MAX_INTERVAL_NS
                                                              : intervalNs * 2;
    prefault_arena();
    if (atomic_load_explicit(&g_unwinderActive, memory_order_relaxed) != UNWINDER_LIBUNWIND) {
      resolve_stacks();
      publish_executor();
      refresh_async_ranges(false);
    }
  }
  if (g_dwfl) dwfl_end(g_dwfl);  // its files stay open only while recording
  g_dwfl = NULL;
  return NULL;
}

// Wall clock: one tick per period, to every thread a signal cannot make fail (wall_ticks.c).
SAMPLER_HIDDEN void *ticker_main(void *unused) {
  (void)unused;
  atomic_store(&g_tickerTid, (pid_t)syscall(SYS_gettid));
  const uint64_t period = 1000000000ull / (uint64_t)g_config.rateHz;
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  uint64_t last = (uint64_t)next.tv_sec * 1000000000ull + (uint64_t)next.tv_nsec;
  uint64_t lastTick = last;
  uint64_t dither = dither_seed((uint64_t)atomic_load(&g_tickerTid), last);
  while (!atomic_load(&g_discoveryStop)) {
    uint64_t due = last + dither_period(&dither, period);
    next.tv_sec = (time_t)(due / 1000000000ull);
    next.tv_nsec = (long)(due % 1000000000ull);
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    if (atomic_load(&g_discoveryStop)) break;
    uint64_t now = CPerfSupport_monotonicNs();
    // The next period counts from this one's due time, so that late wake-ups do not lower
    // the rate; a tick over a period late starts the schedule again from now.
    last = now > due + period ? now : due;
    // Each tick stands for the time since the previous one as it passed, so the ticks add
    // up to the time whatever the drawn periods and the machine's delays.
    uint64_t elapsed = now > lastTick ? now - lastTick : 0;
    lastTick = now;
    uint32_t weightNs = elapsed > UINT32_MAX ? UINT32_MAX : (uint32_t)elapsed;
    pthread_mutex_lock(&g_tableLock);
    for (size_t i = 0; i < g_threadCount; i++) {
      ThreadEntry *entry = &g_threads[i];
      if (entry->exited || entry->source != CPerfSampler_SourceWallTicks || !entry->cookie) continue;
      int32_t number = -1;
      switch (wall_thread_state(entry->tid, &entry->statFd, &entry->syscallFd, &number)) {
        case WALL_RUNNING:
          // Its cpu-clock event samples it. Without one, a tick: it may enter a sleep before the
          // signal lands (2-3 of 200 short nanosleeps failed so).
          if (entry->perfFd < 0) (void)wall_signal(entry->tid, entry->cookie, weightNs);
          break;
        case WALL_BLOCKED_SAFE:
          (void)wall_signal(entry->tid, entry->cookie, weightNs);
          break;
        case WALL_BLOCKED_UNSAFE:
          entry->unsignalledNs += elapsed;
          entry->unsignalledSyscall = number;
          break;
        case WALL_GONE:
          break;
      }
    }
    pthread_mutex_unlock(&g_tableLock);
  }
  return NULL;
}
