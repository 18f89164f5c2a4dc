import Glibc

/// The Time Profiler's accuracy workload: three functions taking about 68, 26 and 5 % of
/// the CPU time, interleaved in rounds of ~100 µs, so a profiler at 1 kHz sees each round's
/// split at a drifting phase. The bench profiles it in process and runs `perf record` on
/// it in `bench-workload split`, in the same sitting.
public enum SplitWorkload {
  public static let functions = ["splitHeavy", "splitMedium", "splitLight"]

  /// Runs rounds until this thread has used `cpuNanoseconds` of CPU time.
  @inline(never)
  public static func run(cpuNanoseconds: UInt64) {
    let start = threadCPUNanoseconds()
    var x: UInt64 = 1
    while threadCPUNanoseconds() - start < cpuNanoseconds {
      for _ in 0..<10 {
        x = splitHeavy(x, 6_800)
        x = splitMedium(x, 2_600)
        x = splitLight(x, 500)
      }
    }
    blackHole(Int(truncatingIfNeeded: x))
  }

  static func threadCPUNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
  }
}

// The same loop in each, so iterations are the split; different constants, so the
// optimizer does not merge the three into one function. Dependent multiplies: it cannot
// fold them either, and every iteration costs the same.
@inline(never) public func splitHeavy(_ seed: UInt64, _ iterations: Int) -> UInt64 {
  var x = seed
  for i in 0..<iterations { x = x &* 6_364_136_223_846_793_005 &+ UInt64(truncatingIfNeeded: i) }
  return x
}

@inline(never) public func splitMedium(_ seed: UInt64, _ iterations: Int) -> UInt64 {
  var x = seed
  for i in 0..<iterations { x = x &* 2_862_933_555_777_941_757 &+ UInt64(truncatingIfNeeded: i) }
  return x
}

@inline(never) public func splitLight(_ seed: UInt64, _ iterations: Int) -> UInt64 {
  var x = seed
  for i in 0..<iterations { x = x &* 3_202_034_522_624_059_733 &+ UInt64(truncatingIfNeeded: i) }
  return x
}
