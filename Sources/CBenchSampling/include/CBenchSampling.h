// CBenchSampling: what sampling costs on this machine before any profiler's own work, for
// `make bench` (bench-workload sampling-floor).
//
// Every CPU-time sampler pays for a timer that interrupts the thread: perf record pays
// that alone (the kernel writes the sample), a signal-based profiler (ours, async-profiler,
// gperftools) also pays for the signal's delivery and return. The bench runs one fixed
// loop under each source with an empty handler, so the difference to the plain loop is
// the floor under any profiler's overhead.
#ifndef CBENCHSAMPLING_H
#define CBENCHSAMPLING_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum CBenchSampling_Source {
  /// No sampling: the plain loop.
  CBenchSampling_None = 0,
  /// A cpu-clock perf event on the thread, overflowing into its ring: no signal.
  CBenchSampling_EventOnly = 1,
  /// The same event, each overflow signalled to the thread (SIGPROF, empty handler), as
  /// the Time Profiler's primary source is.
  CBenchSampling_EventSignal = 2,
} CBenchSampling_Source;

typedef struct CBenchSampling_Run {
  /// Wall time of the loop on the calling thread.
  double milliseconds;
  /// Overflows of the event while the loop ran (0 for CBenchSampling_None).
  uint64_t samples;
  /// 0, or errno of what could not be set up (perf_event_open refused, a handler).
  int32_t error;
} CBenchSampling_Run;

/// Runs the fixed loop `work` times on the calling thread under `source` at `rateHz`.
/// SIGPROF's previous action is restored afterwards.
CBenchSampling_Run CBenchSampling_run(CBenchSampling_Source source, int32_t rateHz, int32_t work);

#ifdef __cplusplus
}
#endif

#endif
