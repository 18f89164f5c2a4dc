// An async call chain whose innermost function burns CPU and suspends every few
// milliseconds, for the sampler's logical chains (an in-process scenario and a program
// recorded with `perfharness record`): a sample in `inner` shows `middle` and `outer` as its
// callers only through the task's async contexts. Plain Swift: no perfharness in it.
import Foundation

/// A block `inner` allocates and keeps, so an allocation stack is taken inside the chain.
public final class AsyncChainBlock {
  public let value: Int
  init(value: Int) { self.value = value }
}

public enum AsyncChain {
  /// Runs `outer` on the cooperative pool (a detached task) and in a task group of two
  /// child tasks, one after the other, each for about `milliseconds` of CPU time.
  public static func run(milliseconds: Int) async -> Int {
    let alone = await Task.detached { await outer(milliseconds: milliseconds) }.value
    let grouped = await withTaskGroup(of: Int.self) { group in
      for _ in 0..<2 { group.addTask { await outer(milliseconds: milliseconds / 2) } }
      var total = 0
      for await part in group { total &+= part }
      return total
    }
    return alone &+ grouped
  }

  @inline(never) static func outer(milliseconds: Int) async -> Int {
    let result = await middle(milliseconds: milliseconds)
    return result &+ 1
  }

  @inline(never) static func middle(milliseconds: Int) async -> Int {
    let result = await inner(milliseconds: milliseconds)
    return result &+ 2
  }

  /// Bursts of about 2 ms of arithmetic on this thread's CPU clock, each followed by
  /// `Task.yield()` (the task may resume on another thread).
  @inline(never) static func inner(milliseconds: Int) async -> Int {
    var total = 0
    var kept: [AsyncChainBlock] = []
    var spent = 0.0
    while spent < Double(milliseconds) / 1000 {
      let start = threadCPUSeconds()
      repeat {
        total = burn(total, rounds: 20_000)
      } while threadCPUSeconds() - start < 0.002
      spent += threadCPUSeconds() - start
      kept.append(AsyncChainBlock(value: total))
      await Task.yield()
    }
    return total &+ kept.count
  }

  @inline(never) static func burn(_ seed: Int, rounds: Int) -> Int {
    var x = seed
    for i in 0..<rounds { x = x &* 6_364_136_223_846_793_005 &+ i }
    return x
  }

  static func threadCPUSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
  }
}
