import Glibc

/// The Time Profiler's accuracy workload: three functions taking about 68, 26 and 5 % of
/// the CPU time, in rounds of a few µs whose lengths vary at random (±50 % per call), so no
/// sampling period can fall into step with them (fixed rounds of 15 µs or 162 µs let both
/// profilers' samples land on a few phases of the round, 2-7 points off). Each sample then
/// draws a function with its share's probability: a 1-second run at 1 kHz carries the
/// binomial noise of ~1000 draws (±1.5 points for the 68 % share). The bench profiles it in
/// process and runs `perf record` on it in `bench-workload split`, in the same sitting.
public enum SplitWorkload {
  public static let functions = ["splitHeavy", "splitMedium", "splitLight"]

  /// Runs rounds until this thread has used `cpuNanoseconds` of CPU time.
  @inline(never)
  public static func run(cpuNanoseconds: UInt64) {
    let start = threadCPUNanoseconds()
    var x: UInt64 = 1
    var random: UInt64 = 0x9E37_79B9_7F4A_7C15
    // 0.5 ... 1.5 times `mean`, from a xorshift generator (its mean is `mean`).
    func vary(_ mean: Int) -> Int {
      random ^= random << 13
      random ^= random >> 7
      random ^= random << 17
      return mean / 2 + Int(random % UInt64(mean + 1))
    }
    // The thread's CPU clock is a system call: read it every ~0.5 ms, so the kernel's share
    // (which perf events at paranoid 2 do not sample) stays under 1 %.
    while threadCPUNanoseconds() - start < cpuNanoseconds {
      for _ in 0..<300 {
        x = splitHeavy(x, vary(680))
        x = splitMedium(x, vary(260))
        x = splitLight(x, vary(50))
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
