// Time, the timeline and marks: blocks' timestamps from the TSC, read every CLOCK_EVERY
// allocations; the live bytes sampled on those reads; the generation marks.
#ifndef CPERFALLOC_TIMELINE_H
#define CPERFALLOC_TIMELINE_H

#include "alloc_support.h"

// MARK: - Time

// Block timestamps come from the TSC (a few ns, against ~20 for clock_gettime), scaled
// to microseconds since start with a factor calibrated against CLOCK_MONOTONIC at start.
extern ALLOC_HIDDEN uint64_t g_startTsc;
extern ALLOC_HIDDEN uint64_t g_microsPerTsc32;  // microseconds per TSC tick, 32.32 fixed point

static inline uint64_t microsSinceStart(void) {
  uint64_t delta = __rdtsc() - g_startTsc;
  return (uint64_t)(((unsigned __int128)delta * g_microsPerTsc32) >> 32);
}

// Reading the TSC costs ~17 ns on this VM (more than the rest of the recording path), so
// the hooks read it only every CLOCK_EVERY allocations per thread and publish the reading
// in g_nowMicros; blocks are stamped with the latest published reading. The timeline is
// sampled on those reads, with an exact time.
#define CLOCK_EVERY 64
extern ALLOC_HIDDEN _Atomic uint64_t g_nowMicros;  // latest reading of any thread, microseconds since start
extern ALLOC_HIDDEN TLS uint32_t t_clockCountdown;

ALLOC_HIDDEN void calibrateClock(void);

// MARK: - Timeline and marks

extern ALLOC_HIDDEN CPerfAlloc_TimelinePoint *g_timeline;
extern ALLOC_HIDDEN uint64_t g_timelineCapacity;
extern ALLOC_HIDDEN uint64_t g_timelineIntervalNs;
extern ALLOC_HIDDEN _Atomic uint64_t g_timelineCount;
extern ALLOC_HIDDEN _Atomic uint64_t g_timelineLast;  // microseconds since start
extern ALLOC_HIDDEN _Atomic uint64_t g_lostTimeline;

ALLOC_HIDDEN void timelineAppend(uint64_t now, int64_t liveBytes);
ALLOC_HIDDEN void timelineMaybeSample(uint64_t micros);
// The live heap, summed over the thread tables; updates the peak.
ALLOC_HIDDEN int64_t sumLiveBytes(void);
// Raises the peak to `total` live bytes if it is higher.
ALLOC_HIDDEN void notePeakLiveBytes(int64_t total);

extern ALLOC_HIDDEN CPerfAlloc_Mark g_marks[CPerfAlloc_MaxMarks];
extern ALLOC_HIDDEN _Atomic uint64_t g_markCount;
extern ALLOC_HIDDEN CPerfSupport_SpinLock g_markLock;

#endif
