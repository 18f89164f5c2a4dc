// The clock's calibration, the timeline's sampling and the sum of live bytes it samples
// (which keeps the peak); the state they share is declared in timeline.h.
#include "timeline.h"

#include "thread_table.h"

ALLOC_HIDDEN uint64_t g_startTsc;
ALLOC_HIDDEN uint64_t g_microsPerTsc32;
ALLOC_HIDDEN _Atomic uint64_t g_nowMicros;
ALLOC_HIDDEN TLS uint32_t t_clockCountdown;
ALLOC_HIDDEN CPerfAlloc_TimelinePoint *g_timeline;
ALLOC_HIDDEN uint64_t g_timelineCapacity;
ALLOC_HIDDEN uint64_t g_timelineIntervalNs;
ALLOC_HIDDEN _Atomic uint64_t g_timelineCount;
ALLOC_HIDDEN _Atomic uint64_t g_timelineLast;
ALLOC_HIDDEN _Atomic uint64_t g_lostTimeline;
ALLOC_HIDDEN CPerfAlloc_Mark g_marks[CPerfAlloc_MaxMarks];
ALLOC_HIDDEN _Atomic uint64_t g_markCount;
ALLOC_HIDDEN CPerfSupport_SpinLock g_markLock;

ALLOC_HIDDEN void calibrateClock(void) {
  uint64_t nsPerTsc32 = 0;
  if (!CPerfSupport_calibrate(&nsPerTsc32, &g_startNs, &g_startTsc)) {
    g_startNs = CPerfSupport_monotonicNs();  // a TSC that stands still: every block at the start
    g_startTsc = __rdtsc();
  }
  g_microsPerTsc32 = nsPerTsc32 / 1000;
}

ALLOC_HIDDEN void timelineAppend(uint64_t now, int64_t liveBytes) {
  uint64_t index = atomic_fetch_add_explicit(&g_timelineCount, 1, memory_order_relaxed);
  if (index >= g_timelineCapacity) {
    atomic_fetch_sub_explicit(&g_timelineCount, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_lostTimeline, 1, memory_order_relaxed);
    return;
  }
  g_timeline[index].timestampNs = now;
  g_timeline[index].liveBytes = liveBytes > 0 ? (uint64_t)liveBytes : 0;
}

ALLOC_HIDDEN void timelineMaybeSample(uint64_t micros) {
  uint64_t last = atomic_load_explicit(&g_timelineLast, memory_order_relaxed);
  if (micros - last < g_timelineIntervalNs / 1000) return;
  if (!atomic_compare_exchange_strong_explicit(&g_timelineLast, &last, micros, memory_order_relaxed,
                                               memory_order_relaxed))
    return;
  timelineAppend(g_startNs + micros * 1000, sumLiveBytes());
}

// The live heap is the sum of the thread tables' counters (each written by its thread): no
// shared counter on the hot path. It is summed, and the peak updated, whenever the
// timeline samples (at most once per interval), at marks and at stop, so the peak has
// the timeline's resolution.
ALLOC_HIDDEN void notePeakLiveBytes(int64_t total) {
  int64_t peak = atomic_load_explicit(&g_peakLiveBytes, memory_order_relaxed);
  while (total > peak && !atomic_compare_exchange_weak_explicit(&g_peakLiveBytes, &peak, total, memory_order_relaxed,
                                                                memory_order_relaxed)) {}
}

ALLOC_HIDDEN int64_t sumLiveBytes(void) {
  int64_t total = 0;
  tablesLive(NULL, &total);
  notePeakLiveBytes(total);
  return total;
}
