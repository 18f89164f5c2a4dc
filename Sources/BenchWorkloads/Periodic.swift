import Glibc

/// Work that repeats at the sampling period: a unit of 1 ms of this thread's CPU time (the
/// 1 kHz default period) split 50/30/20 among three functions, each running until its share
/// of the unit is spent on the thread's CPU clock, so the loop stays in step with a
/// fixed-period CPU-time sampler (the sampler's own handler time included). A fixed-period
/// sampler then lands on nearly one phase of the unit for long stretches; a dithered one
/// lands anywhere. Each call is timed with the thread's CPU clock around it: the truth each
/// run is judged against.
public enum PeriodicWorkload {
  public static let functions = ["periodicHalf", "periodicThird", "periodicFifth"]
  static let shares: [UInt64] = [50, 30, 20]

  /// Runs units until this thread has used `cpuNanoseconds` of CPU time; returns each
  /// function's share (percent) of the three functions' CPU time, timed around every call.
  @inline(never)
  public static func run(cpuNanoseconds: UInt64, unitNanoseconds: UInt64 = 1_000_000) -> [Double] {
    var spent: [UInt64] = [0, 0, 0]
    var x: UInt64 = 1
    let start = threadCPUNanoseconds()
    var unit = start
    while unit - start < cpuNanoseconds {
      var deadline = unit
      for index in 0..<3 {
        deadline += unitNanoseconds * shares[index] / 100
        let before = threadCPUNanoseconds()
        switch index {
        case 0: x = periodicHalf(x, until: deadline)
        case 1: x = periodicThird(x, until: deadline)
        default: x = periodicFifth(x, until: deadline)
        }
        spent[index] += threadCPUNanoseconds() - before
      }
      // The next unit one unit after this one's start, not after its (overshot) end: the
      // loop keeps its period on the CPU clock.
      unit = max(deadline, threadCPUNanoseconds() - unitNanoseconds / 2)
    }
    blackHole(Int(truncatingIfNeeded: x))
    let total = Double(spent.reduce(0, +))
    return spent.map { total > 0 ? Double($0) / total * 100 : 0 }
  }
}

// Dependent multiplies in chunks of a few µs, then the thread's CPU clock (a system call, so
// not after every iteration: the kernel's share, which perf events at paranoid 2 do not
// sample, stays small). Different constants, so the optimizer does not merge the three.
@inline(never) public func periodicHalf(_ seed: UInt64, until deadline: UInt64) -> UInt64 {
  var x = seed
  repeat {
    for i in 0..<4000 { x = x &* 6_364_136_223_846_793_005 &+ UInt64(truncatingIfNeeded: i) }
  } while PeriodicWorkload.threadCPUNanoseconds() < deadline
  return x
}

@inline(never) public func periodicThird(_ seed: UInt64, until deadline: UInt64) -> UInt64 {
  var x = seed
  repeat {
    for i in 0..<4000 { x = x &* 2_862_933_555_777_941_757 &+ UInt64(truncatingIfNeeded: i) }
  } while PeriodicWorkload.threadCPUNanoseconds() < deadline
  return x
}

@inline(never) public func periodicFifth(_ seed: UInt64, until deadline: UInt64) -> UInt64 {
  var x = seed
  repeat {
    for i in 0..<4000 { x = x &* 3_202_034_522_624_059_733 &+ UInt64(truncatingIfNeeded: i) }
  } while PeriodicWorkload.threadCPUNanoseconds() < deadline
  return x
}

extension PeriodicWorkload {
  @inline(__always)
  static func threadCPUNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
  }
}
