import CPerfSampler
import Dispatch
import Glibc
import Testing
import UnwindCases

@testable import PerfHarness

// The sampler is process-wide (one session at a time), so every test that records
// lives in this one serialized suite. Other suites may run meanwhile: samples are
// filtered by the tid of the thread that runs each workload.
extension ProcessWideRecording {
  @Suite(.serialized)
  struct SamplingSessionTests {
    // MARK: Workloads

    static func monotonicNanoseconds() -> UInt64 {
      var ts = timespec()
      clock_gettime(CLOCK_MONOTONIC, &ts)
      return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    static func threadCPUNanoseconds() -> UInt64 {
      var ts = timespec()
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
      return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// Burns this thread's CPU until it has consumed `nanoseconds` of CPU time (not wall
    /// time: the machine may be shared). Returns the CPU time actually consumed.
    @inline(never)
    static func burnCPU(nanoseconds: UInt64) -> UInt64 {
      let start = threadCPUNanoseconds()
      var x: UInt64 = 1
      while threadCPUNanoseconds() - start < nanoseconds {
        for i in 0..<20_000 { x = x &* 6_364_136_223_846_793_005 &+ UInt64(truncatingIfNeeded: i) }
      }
      blackHole(x)
      return threadCPUNanoseconds() - start
    }

    @inline(never)
    static func blackHole(_ value: UInt64) {
      if value == 42 { print("") }
    }

    /// Called through a global function value so the optimizer keeps every level as a
    /// real frame, even in release builds.
    nonisolated(unsafe) static var recurseThrough: (Int, UInt64) -> UInt64 = recurse

    @inline(never)
    static func recurse(_ depth: Int, _ nanoseconds: UInt64) -> UInt64 {
      if depth == 0 { return burnCPU(nanoseconds: nanoseconds) }
      let result = recurseThrough(depth - 1, nanoseconds)
      return result &+ 1
    }

    /// Holds what the spawned thread reports; written by it, read only after the join.
    final class ThreadReport: @unchecked Sendable {
      var tid: Int32 = 0
      var value: UInt64 = 0
      let body: @Sendable () -> UInt64
      init(_ body: @escaping @Sendable () -> UInt64) { self.body = body }
    }

    final class Box<T>: @unchecked Sendable {  // hands values to a pthread's entry point
      let value: T
      init(_ value: T) { self.value = value }
    }

    /// Runs `body` on a fresh pthread and returns its tid and the body's result.
    static func onNewThread(_ body: @escaping @Sendable () -> UInt64) -> (tid: Int32, value: UInt64) {
      let report = ThreadReport(body)
      var thread = pthread_t()
      let rc = pthread_create(
        &thread, nil,
        { raw in
          let report = Unmanaged<ThreadReport>.fromOpaque(raw!).takeRetainedValue()
          report.tid = CPerfSampler_gettid()
          report.value = report.body()
          return nil
        }, Unmanaged.passRetained(report).toOpaque())
      precondition(rc == 0)
      pthread_join(thread, nil)
      return (report.tid, report.value)
    }

    // MARK: Tests

    @Test func cpuSamplingWeightsMatchConsumedCPU() throws {
      let session = try SamplingSession.start(SamplerConfiguration())
      let me = CPerfSampler_gettid()
      let consumed = Self.burnCPU(nanoseconds: 300_000_000)
      let result = session.stop()

      let mine = result.samples.filter { $0.threadID == me }
      let weightMs = mine.reduce(0) { $0 + $1.weightMilliseconds }
      let consumedMs = Double(consumed) / 1e6
      #expect(abs(weightMs - consumedMs) <= consumedMs * 0.3, "weights \(weightMs) ms vs CPU \(consumedMs) ms")
      #expect(result.lostSamples == 0)
      #expect(result.signalsReceived >= mine.count)
      #expect(!mine.isEmpty)
      for sample in mine {
        #expect(sample.frames.count >= 1)
        #expect(sample.frames.first != 0)
        #expect(sample.timestampNanoseconds >= result.startNanoseconds)
        #expect(sample.timestampNanoseconds <= result.stopNanoseconds)
      }
      let thread = result.threads.first { $0.threadID == me }
      #expect(thread != nil)
      #expect(thread?.isMain == (me == getpid()))
    }

    @Test func threadsCreatedAfterStartAreSampled() throws {
      let session = try SamplingSession.start(SamplerConfiguration())
      let burned = DispatchSemaphore(value: 0)
      let stopped = DispatchSemaphore(value: 0)
      let report = ThreadReport {
        // Renamed after the sampler may already have seen it: the name is read again.
        let fd = open("/proc/thread-self/comm", O_WRONLY)
        if fd >= 0 {
          _ = "late-burner".withCString { write(fd, $0, strlen($0)) }
          close(fd)
        }
        return Self.burnCPU(nanoseconds: 200_000_000)
      }
      var thread = pthread_t()
      let context = Unmanaged.passRetained(Box((report, burned, stopped))).toOpaque()
      let rc = pthread_create(
        &thread, nil,
        { raw in
          let box = Unmanaged<Box<(ThreadReport, DispatchSemaphore, DispatchSemaphore)>>.fromOpaque(raw!)
            .takeRetainedValue()
          let (report, burned, stopped) = box.value
          report.tid = CPerfSampler_gettid()
          report.value = report.body()
          burned.signal()
          stopped.wait()  // alive at stop, so stop reads its current name
          return nil
        }, context)
      try #require(rc == 0)
      burned.wait()
      let result = session.stop()
      stopped.signal()
      pthread_join(thread, nil)

      let theirs = result.samples.filter { $0.threadID == report.tid }
      #expect(!theirs.isEmpty, "no samples from thread \(report.tid) (consumed \(report.value / 1_000_000) ms)")
      let weight = theirs.reduce(0) { $0 + $1.weightMilliseconds }
      // Discovery runs every few ms: allow for the part of the burn before it.
      #expect(Double(weight) >= Double(report.value) / 1e6 * 0.5)
      let sampled = result.threads.first { $0.threadID == report.tid }
      #expect(sampled?.isMain == false)
      #expect(sampled?.name == "late-burner")
    }

    @Test func tinyBufferCountsLostSamples() throws {
      var configuration = SamplerConfiguration()
      configuration.bufferBytes = 4096
      let session = try SamplingSession.start(configuration)
      // Deep stacks make every sample big (over 800 bytes), so a handful fill 4 KB
      // whatever the machine's load does to the number of ticks.
      _ = Self.recurse(100, 300_000_000)
      let result = session.stop()
      #expect(result.lostSamples > 0, "signals \(result.signalsReceived), samples \(result.samples.count)")
      let bytes = result.samples.reduce(0) { $0 + 24 + $1.frames.count * 8 }
      #expect(bytes <= 4096)
      #expect(result.signalsReceived == result.samples.count + result.lostSamples)
    }

    @Test func wallClockSamplesABlockedThread() throws {
      var configuration = SamplerConfiguration()
      configuration.clock = .wall
      let session = try SamplingSession.start(configuration)
      let me = CPerfSampler_gettid()
      // Blocked in pthread_join, a futex wait without a timeout: the kernel restarts it after
      // a handler installed with SA_RESTART, so wall-clock ticks sample it.
      var sleeper = pthread_t()
      let rc = pthread_create(
        &sleeper, nil,
        { _ in
          var request = timespec(tv_sec: 0, tv_nsec: 300_000_000)
          var remaining = timespec()
          while nanosleep(&request, &remaining) != 0 { request = remaining }
          return nil
        }, nil)
      try #require(rc == 0)
      pthread_join(sleeper, nil)
      let result = session.stop()
      let mine = result.samples.filter { $0.threadID == me }
      let weight = mine.reduce(0) { $0 + $1.weightMilliseconds }
      #expect(weight >= 150, "wall weight \(weight) for a 300 ms join")
      #expect(weight <= 600)
      #expect(result.threads.first { $0.threadID == me }?.source == .wallTicks)
    }

    /// A signal handled in nanosleep makes it fail with EINTR whatever SA_RESTART says
    /// (per-thread wall timers interrupted 199 of 200): wall-clock ticks leave such a thread
    /// alone and count its time instead.
    @Test func wallClockLeavesNanosleepUninterrupted() throws {
      var configuration = SamplerConfiguration()
      configuration.clock = .wall
      let session = try SamplingSession.start(configuration)
      let me = CPerfSampler_gettid()
      var interrupted = 0
      for _ in 0..<200 {
        var request = timespec(tv_sec: 0, tv_nsec: 1_500_000)
        if nanosleep(&request, nil) != 0 && errno == EINTR { interrupted += 1 }
      }
      let result = session.stop()
      #expect(interrupted == 0, "\(interrupted) of 200 nanosleeps failed with EINTR")
      let thread = try #require(result.threads.first { $0.threadID == me })
      // 300 ms asleep: most of it counted as not signalled, in clock_nanosleep or nanosleep.
      #expect(thread.unsignalledNanoseconds >= 150_000_000, "\(thread.unsignalledNanoseconds) ns counted")
      #expect([35, 230].contains(thread.unsignalledSyscall))
    }

    @Test func samplerClockKeepsTheMonotonicClocksTime() throws {
      var configuration = SamplerConfiguration()
      configuration.clock = .wall
      let session = try SamplingSession.start(configuration)
      // Each reading of the sampler's clock between two of CLOCK_MONOTONIC, taken again
      // when something came between them.
      func bothClocks() -> (sampler: UInt64, monotonic: UInt64) {
        var reading = (sampler: UInt64(0), monotonic: UInt64(0))
        for _ in 0..<100 {
          let before = Self.monotonicNanoseconds()
          let sampler = CPerfSampler_nowNs()
          let after = Self.monotonicNanoseconds()
          reading = (sampler, before + (after - before) / 2)
          if after - before < 20_000 { break }
        }
        return reading
      }
      let (samplerStart, monotonicStart) = bothClocks()
      _ = Self.burnCPU(nanoseconds: 300_000_000)
      let (samplerEnd, monotonicEnd) = bothClocks()
      let result = session.stop()
      // Calibrated over 2 ms against CLOCK_MONOTONIC (readings a preemption split are
      // taken again): 1 µs off there is 0.05 % here.
      let elapsed = Double(monotonicEnd - monotonicStart)
      #expect(abs(Double(samplerEnd - samplerStart) - elapsed) < elapsed * 0.0005 + 20_000)
      #expect(abs(Double(samplerStart) - Double(monotonicStart)) < 30_000)
      #expect(result.startNanoseconds <= samplerStart && samplerEnd <= result.stopNanoseconds)
      #expect(!result.samples.isEmpty)
      #expect(
        result.samples.allSatisfy {
          $0.timestampNanoseconds >= result.startNanoseconds && $0.timestampNanoseconds <= result.stopNanoseconds
        })
    }

    @Test func deepStacksKeepAtLeast128Frames() throws {
      let session = try SamplingSession.start(SamplerConfiguration())
      let me = CPerfSampler_gettid()
      _ = Self.recurse(150, 200_000_000)
      let result = session.stop()
      let mine = result.samples.filter { $0.threadID == me }
      #expect(!mine.isEmpty)
      let deepest = mine.map(\.frames.count).max() ?? 0
      #expect(deepest >= 128, "deepest sample has \(deepest) frames")
      #expect(mine.allSatisfy { $0.frames.count <= 256 })
    }

    @Test func secondConcurrentStartFailsAndRestartWorks() throws {
      let first = try SamplingSession.start(SamplerConfiguration())
      #expect {
        _ = try SamplingSession.start(SamplerConfiguration())
      } throws: { error in
        (error as? SamplingError)?.code == .alreadyRunning
      }
      let firstResult = first.stop()
      let again = first.stop()  // idempotent
      #expect(again.samples.count == firstResult.samples.count)

      let second = try SamplingSession.start(SamplerConfiguration())
      let me = CPerfSampler_gettid()
      // Long enough that a busy machine still arms this thread's timer and ticks a few times.
      _ = Self.burnCPU(nanoseconds: 250_000_000)
      let secondResult = second.stop()
      #expect(secondResult.samples.contains { $0.threadID == me })
      #expect(secondResult.startNanoseconds >= firstResult.stopNanoseconds)
    }

    @Test(arguments: [0, -5, 10_001, 100_000])
    func outOfRangeRatesThrow(rate: Int) {
      var configuration = SamplerConfiguration()
      configuration.rateHz = rate
      #expect {
        _ = try SamplingSession.start(configuration)
      } throws: { error in
        guard let error = error as? SamplingError else { return false }
        return error.code == .invalidConfiguration && error.description.contains("rateHz")
      }
    }

    @Test func otherInvalidConfigurationsThrow() {
      var tooDeep = SamplerConfiguration()
      tooDeep.maxDepth = 0
      #expect(throws: SamplingError.self) { _ = try SamplingSession.start(tooDeep) }
      var tooSmall = SamplerConfiguration()
      tooSmall.bufferBytes = 100
      #expect(throws: SamplingError.self) { _ = try SamplingSession.start(tooSmall) }
    }

    @Test(arguments: SamplingClock.allCases)
    func exitingThreadsAndDispatchWorkersAreHandled(clock: SamplingClock) throws {
      var configuration = SamplerConfiguration()
      configuration.clock = clock
      let session = try SamplingSession.start(configuration)
      // Threads that come and go while timers are armed for them.
      for _ in 0..<100 {
        _ = Self.onNewThread { Self.burnCPU(nanoseconds: 1_000_000) }
      }
      // And one that runs long enough to be sampled: when the other core is busy, Dispatch
      // may run every iteration below on this thread, the only other one sampled then.
      _ = Self.onNewThread { Self.burnCPU(nanoseconds: 60_000_000) }
      DispatchQueue.concurrentPerform(iterations: 8) { _ in
        _ = Self.burnCPU(nanoseconds: 20_000_000)
      }
      let result = session.stop()
      // Discovery polls every few ms, so some of the 1 ms threads are never seen.
      #expect(result.threads.count > 10)
      #expect(Set(result.samples.map(\.threadID)).count >= 2)
      #expect(result.samples.allSatisfy { !$0.frames.isEmpty && $0.frames[0] != 0 })
    }

    @Test func droppedSessionFreesTheSampler() throws {
      do { _ = try SamplingSession.start(SamplerConfiguration()) }
      let session = try SamplingSession.start(SamplerConfiguration())
      _ = session.stop()
    }

    /// This thread's samples of `work` in verify mode: each stack is libunwind's, and the
    /// fast path's stacks that differ from it are counted (CPerfSampler_unwinderMismatches).
    static func verifiedSamples(of work: () -> Void) throws -> [RawSample] {
      CPerfSampler_setUnwinder(2)  // verify
      defer { CPerfSampler_setUnwinder(-1) }
      let session = try SamplingSession.start(SamplerConfiguration())
      let me = CPerfSampler_gettid()
      work()
      return session.stop().samples.filter { $0.threadID == me }
    }

    /// Shaped like recurse, so its frame lines up with recurse's: a stack entered through
    /// it differs from one entered through recurse only in one return address.
    @inline(never)
    static func otherRecurse(_ depth: Int, _ nanoseconds: UInt64) -> UInt64 {
      if depth == 0 { return burnCPU(nanoseconds: nanoseconds) }
      let result = recurseThrough(depth - 1, nanoseconds)
      return result &+ 2
    }

    /// A thread's last walk is reused only where the stack still holds it: stacks that
    /// change between samples (depth, call sites, a shared outer part) must still come out
    /// exactly as libunwind sees them.
    @Test(.samplesWhereTheSignalLands) func reusedWalksMatchLibunwindWhenStacksChange() throws {
      let mine = try Self.verifiedSamples {
        var generator = SystemRandomNumberGenerator()
        let start = Self.threadCPUNanoseconds()
        while Self.threadCPUNanoseconds() - start < 400_000_000 {
          // Slices shorter than the 4 ms tick, so consecutive samples mostly see other stacks,
          // often of the same depth with the same frames at the same places.
          let depth = Int.random(in: 20...21, using: &generator)
          let slice = UInt64.random(in: 300_000...3_000_000, using: &generator)
          _ = Bool.random(using: &generator) ? Self.recurse(depth, slice) : Self.otherRecurse(depth, slice)
        }
      }
      #expect(mine.count >= 20, "only \(mine.count) samples")
      #expect(Set(mine.map { $0.frames.count }).count >= 2, "the stacks did not change between samples")
      #expect(CPerfSampler_fastSamples() > 0, "the fast path never ran")
      #expect(
        CPerfSampler_unwinderMismatches() == 0,
        "\(CPerfSampler_unwinderMismatches()) of \(CPerfSampler_fastSamples()) fast stacks differ from libunwind")
    }

    /// Work spread over many library PCs, each a PC without a rule the first time a sample
    /// lands on it.
    @inline(never)
    static func variedLibraryWork(_ depth: Int, _ nanoseconds: UInt64) -> UInt64 {
      if depth > 0 { return variedLibraryWork(depth - 1, nanoseconds) &+ 1 }
      let start = threadCPUNanoseconds()
      var generator = SystemRandomNumberGenerator()
      var total: UInt64 = 0
      while threadCPUNanoseconds() - start < nanoseconds {
        let numbers = (0..<2_000).map { _ in Int.random(in: 0..<1_000_000, using: &generator) }
        total &+= UInt64(truncatingIfNeeded: numbers.sorted()[1_000])
        total &+= UInt64(truncatingIfNeeded: Set(numbers).count)
        let text = numbers.prefix(200).map { String(Double($0) / 7) }.joined(separator: ",")
        total &+= UInt64(truncatingIfNeeded: text.hashValue & 0xFF)
        total &+= UInt64(truncatingIfNeeded: text.split(separator: ",").compactMap { Double($0) }.count)
      }
      return total
    }

    /// A sample on a PC without a rule copies the stack only up to a caller frame of the
    /// thread's last walk that the stack still holds, and is finished from there: those
    /// stacks too must come out exactly as libunwind sees them.
    @Test(.samplesWhereTheSignalLands) func deferredSamplesFinishedFromTheLastWalkMatchLibunwind() throws {
      try Self.expectRejoinedStacksMatchLibunwind { _ = Self.variedLibraryWork(25, 400_000_000) }
    }

    /// A rule learned on a stack copy is given to the whole range of its CFI row: samples
    /// at addresses never met before then take rules no frame of theirs was learned from,
    /// and their stacks must still come out exactly as libunwind sees them.
    @Test(.samplesWhereTheSignalLands) func rulesGivenToWholeRowsMatchLibunwind() throws {
      let mine = try Self.verifiedSamples {
        _ = Self.variedLibraryWork(25, 400_000_000)
      }
      #expect(mine.count >= 40, "only \(mine.count) samples")
      #expect(CPerfSampler_rangeRules() > 0, "no row's range got a rule")
      #expect(
        CPerfSampler_unwinderMismatches() == 0,
        "\(CPerfSampler_unwinderMismatches()) of \(CPerfSampler_fastSamples()) fast stacks differ from libunwind")
    }

    /// Samples `work` in verify mode: this thread's samples, some finished from the thread's
    /// last walk, all as libunwind sees them.
    static func expectRejoinedStacksMatchLibunwind(_ work: () -> Void) throws {
      let mine = try Self.verifiedSamples(of: work)
      #expect(mine.count >= 20, "only \(mine.count) samples")
      #expect(CPerfSampler_rejoinedSamples() > 0, "no sample was finished from the last walk")
      #expect(
        CPerfSampler_unwinderMismatches() == 0,
        "\(CPerfSampler_unwinderMismatches()) of \(CPerfSampler_fastSamples()) fast stacks differ from libunwind")
    }

    /// A sample in a leaf without unwind information (the Swift runtime's metadata accessor
    /// thunks have none) is deferred; libunwind guesses its caller from the frame-pointer
    /// chain, with a made-up stack pointer, so the walk on the partial copy never reaches the
    /// last walk's frame at its stack pointer. Those stacks too must come out as libunwind's,
    /// and be finished from the last walk rather than given up.
    @Test(.samplesWhereTheSignalLands) func leavesWithoutUnwindInfoMatchLibunwind() throws {
      try Self.expectRejoinedStacksMatchLibunwind {
        Self.blackHole(UnwindCases_spinInLeafWithoutUnwindInfo(400_000_000))
      }
      #expect(CPerfSampler_unwindFallbacks() == 0, "stacks cut short")
    }

    /// Between `pop %rbp` and `ret`, the CFI still names rbp's slot, below sp by then.
    /// The register holds the caller's rbp there, so those PCs get a rule and their samples
    /// the fast path (they took libunwind in the handler, 15-40 µs each, when no rule shape
    /// fit), with libunwind's stacks.
    @Test(.samplesWhereTheSignalLands) func epiloguesAfterPopTakeTheFastPath() throws {
      // About half of the samples land in the epilogue's loop.
      try Self.expectFastPathWithLibunwindStacks {
        Self.blackHole(UnwindCases_spinAfterPopInEpilogue(400_000_000))
      }
    }

    /// Samples `work` (at least 40 of this thread's samples) in verify mode: at least 90 %
    /// take the fast path (deferred ones included), and every stack is libunwind's.
    static func expectFastPathWithLibunwindStacks(_ work: () -> Void) throws {
      let mine = try Self.verifiedSamples(of: work)
      #expect(mine.count >= 40, "only \(mine.count) samples")
      #expect(
        CPerfSampler_unwinderMismatches() == 0,
        "\(CPerfSampler_unwinderMismatches()) of \(CPerfSampler_fastSamples()) fast stacks differ from libunwind")
      #expect(
        Double(CPerfSampler_fastSamples()) >= 0.9 * Double(mine.count),
        "\(CPerfSampler_fastSamples()) fast of \(mine.count) samples")
    }

    /// Where no rule shape fits (here a function without an FDE, which libunwind steps
    /// through with its own fallback), a sample is deferred with a copy of the whole stack
    /// and finished with libunwind's step on the copy: not unw_backtrace in the handler
    /// (30-50 µs each), and with libunwind's stacks.
    @Test(.samplesWhereTheSignalLands) func framesNoRuleFitsAreDeferredNotUnwoundInTheHandler() throws {
      try Self.expectFastPathWithLibunwindStacks {
        Self.blackHole(UnwindCases_spinInLoopWithoutUnwindInfo(400_000_000))
      }
    }

    /// A caller frame without unwind information, where libunwind follows the frame-pointer
    /// chain, gets a frame-pointer rule: its samples are walked in the handler, not deferred
    /// with a copy of the whole stack each time, and come out as libunwind's stacks.
    @Test(.samplesWhereTheSignalLands) func callerFramesWithoutUnwindInfoAreWalkedNotDeferred() throws {
      try Self.expectFastPathWithLibunwindStacks {
        Self.blackHole(UnwindCases_spinUnderFrameWithoutUnwindInfo(400_000_000))
      }
      let deferred = CPerfSampler_deferredSamples()
      let fast = CPerfSampler_fastSamples()
      #expect(Double(deferred) <= 0.2 * Double(fast), "\(deferred) of \(fast) samples deferred")
    }

    /// The handler follows rbp's chain ahead of the walk to prefetch the callers' rules. In
    /// a leaf that uses rbp for anything else (an address outside the stack, a misaligned
    /// one, made-up frames), that must read nothing outside the stack and change no stack:
    /// the samples take the fast path, with libunwind's stacks.
    @Test(.samplesWhereTheSignalLands) func rbpThatIsNoFramePointerChangesNoStack() throws {
      try Self.expectFastPathWithLibunwindStacks {
        Self.blackHole(UnwindCases_spinWithRbpNotAFrame(400_000_000))
      }
    }

    @inline(never)
    static func wideLeafBelow(_ depth: Int) -> UInt64 {
      if depth == 0 { return UnwindCases_wideLeaf(UInt64(depth)) }
      return wideLeafBelow(depth - 1) &+ 1
    }

    /// Runs the wide leaf under recursions of random depth, so that consecutive samples
    /// mostly see other stacks and look up their callers' rules.
    static func wideLeafAtVaryingDepths(nanoseconds: UInt64) {
      var generator = SystemRandomNumberGenerator()
      let start = threadCPUNanoseconds()
      while threadCPUNanoseconds() - start < nanoseconds {
        blackHole(wideLeafBelow(Int.random(in: 10...30, using: &generator)))
      }
    }

    /// A rule learned off the handler is given to the rest of its CFI row, but only where the
    /// rule cache has room: a leaf wider than the cache, sampled at new addresses all the
    /// time, must not push out the rules the walks learned for the frames that call it.
    /// (Range entries that could evict gave 170 K entries here, and kept the rules of about
    /// half the callers; on Foundation's JSON coding, samples kept being deferred at callers.)
    @Test(.samplesWhereTheSignalLands) func rulesGivenToRowsPushNoCallerRuleOut() throws {
      let session = try SamplingSession.start(SamplerConfiguration())
      Self.wideLeafAtVaryingDepths(nanoseconds: 900_000_000)
      let samples = session.stop().samples.filter { $0.threadID == CPerfSampler_gettid() }
      // Not the test task's logical frames (resume functions' entries, which have no rule).
      let callers = Set(samples.flatMap { $0.frames.dropFirst() }.filter { $0 & UInt(CPerfSampler_AsyncFrameTag) == 0 })
      let kept = callers.filter { CPerfSampler_cachedRule(UInt64($0), 0) != 0 }
      #expect(samples.count >= 300, "only \(samples.count) samples")
      #expect(CPerfSampler_rangeRules() >= 8192, "only \(CPerfSampler_rangeRules()) entries given from rows")
      #expect(
        Double(kept.count) >= 0.9 * Double(callers.count),
        "the rule cache kept the rules of \(kept.count) of the \(callers.count) caller frames met")
    }

    /// The fast unwinder (per-PC rules applied to the interrupted stack) must produce the
    /// same stacks as unw_backtrace: verify mode computes both for every sample.
    @Test(.samplesWhereTheSignalLands) func fastUnwinderMatchesLibunwindOnDeepRecursion() throws {
      let mine = try Self.verifiedSamples {
        _ = Self.recurse(150, 300_000_000)
      }
      #expect(!mine.isEmpty)
      #expect(CPerfSampler_fastSamples() > 0, "the fast path never ran")
      #expect(
        CPerfSampler_unwinderMismatches() == 0,
        "\(CPerfSampler_unwinderMismatches()) of \(CPerfSampler_fastSamples()) fast stacks differ from libunwind")
      #expect((mine.map(\.frames.count).max() ?? 0) >= 128)
    }
  }
}
