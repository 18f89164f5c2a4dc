import CPerfSampler
import Dispatch
import Foundation
import Glibc
import Synchronization
import Testing

@testable import PerfHarness

// The sample sources, thread birth and death, and coverage: real perf events, real
// threads, real signals. Loads change wall times, not CPU-time rates, so the rates here are
// per CPU second and compared as ratios with margins.
extension ProcessWideRecording {
  @Suite(.serialized)
  struct SampleSourceTests {
    typealias Workloads = SamplingSessionTests

    static let perfEvents = CPerfSampler_perfEventsAvailable() != 0

    /// pthread_setname_np(pthread_self(), name), which Glibc's module does not export.
    static func nameThisThread(_ name: String) {
      let fd = open("/proc/thread-self/comm", O_WRONLY)
      precondition(fd >= 0)
      _ = name.withCString { write(fd, $0, strlen($0)) }
      close(fd)
    }

    @Test(.enabled(if: perfEvents, "perf events refused here"))
    func cpuClockDeliversTheRequestedRate() throws {
      let session = try SamplingSession.start(SamplerConfiguration())
      let me = CPerfSampler_gettid()
      let consumed = Workloads.burnCPU(nanoseconds: 400_000_000)
      let result = session.stop()
      let mine = result.samples.filter { $0.threadID == me }
      let perCPUSecond = Double(mine.count) / (Double(consumed) / 1e9)
      // Timers on kernel ticks gave 224-265 at 1 kHz (HZ=250); the event gives ~985.
      #expect(perCPUSecond >= 800, "\(mine.count) samples in \(consumed / 1_000_000) ms of CPU")
      let weight = mine.reduce(0) { $0 + $1.weightMilliseconds }
      #expect(abs(weight - Double(consumed) / 1e6) <= Double(consumed) / 1e6 * 0.1)
      let thread = result.threads.first { $0.threadID == me }
      #expect(thread?.source == .perfEvent)
      #expect(result.perfErrno == 0)
      let cpu = Double(thread?.cpuNanoseconds ?? 0) / 1e6
      #expect(cpu >= Double(consumed) / 1e6, "CPU time \(cpu) ms")
    }

    /// Issue 41: a thread's weights are its CPU time, so its share of the profile is its share
    /// of the CPU. Each weight is a difference of the thread's clock between two of its
    /// samples, so the weights can never add up to more than the thread's CPU time: over it
    /// by more than 2 % is a sample counted twice or weighed by something other than the clock
    /// (weights rounded to periods and clamped to at least one reached 107-124 %). Under it
    /// is the time no sample weighs: before the thread was armed (a few system calls) and
    /// after its last sample. For the perf event that tail is under a period (1.5 dithered),
    /// under 2 % of 150 ms. A CPU-time timer fires only at a kernel tick that finds its thread
    /// running, so its tail is what the machine's load makes it: only the upper bound holds.
    @Test(.enabled(if: perfEvents, "perf events refused here"), arguments: [false, true])
    func eachThreadsWeightsAddUpToItsCPUTime(timersOnly: Bool) throws {
      var configuration = SamplerConfiguration()
      configuration.timersOnly = timersOnly
      let session = try SamplingSession.start(configuration)
      let burns: [UInt64] = timersOnly ? [400, 600] : [150, 250, 400]
      let tids = burns.map { ms in Workloads.onNewThread { Workloads.burnCPU(nanoseconds: ms * 1_000_000) }.tid }
      let result = session.stop()
      for tid in tids {
        let weight = result.samples.filter { $0.threadID == tid }.reduce(0) { $0 + $1.weightMilliseconds }
        let thread = try #require(result.threads.first { $0.threadID == tid })
        #expect(thread.source == (timersOnly ? .timer : .perfEvent))
        let cpu = Double(try #require(thread.cpuNanoseconds)) / 1e6
        #expect(weight <= cpu * 1.02, "thread \(tid): weights \(weight) ms, CPU \(cpu) ms")
        if !timersOnly {
          #expect(weight >= cpu * 0.98, "thread \(tid): weights \(weight) ms, CPU \(cpu) ms")
        }
      }
    }

    @Test func timersRemainTheFallback() throws {
      var configuration = SamplerConfiguration()
      configuration.timersOnly = true
      let session = try SamplingSession.start(configuration)
      let me = CPerfSampler_gettid()
      let consumed = Workloads.burnCPU(nanoseconds: 200_000_000)
      let result = session.stop()
      let mine = result.samples.filter { $0.threadID == me }
      #expect(result.threads.first { $0.threadID == me }?.source == .timer)
      let weight = mine.reduce(0) { $0 + $1.weightMilliseconds }
      #expect(abs(weight - Double(consumed) / 1e6) <= Double(consumed) / 1e6 * 0.3)
    }

    @Test func namesSetInsideTheThreadAndBeforeStart() throws {
      // Named (by itself) before the recording starts, alive throughout.
      let before = DispatchSemaphore(value: 0)
      let release = DispatchSemaphore(value: 0)
      let beforeTID = Mutex<Int32>(0)
      let early = Thread {
        Self.nameThisThread("early-named")
        beforeTID.withLock { $0 = CPerfSampler_gettid() }
        before.signal()
        _ = Workloads.burnCPU(nanoseconds: 20_000_000)
        release.wait()
        _ = Workloads.burnCPU(nanoseconds: 20_000_000)
      }
      early.start()
      before.wait()

      let session = try SamplingSession.start(SamplerConfiguration())
      release.signal()
      // Names itself as it starts, as apps do, and ends before stop.
      let insideTID = Mutex<Int32>(0)
      let ended = DispatchSemaphore(value: 0)
      Thread {
        Self.nameThisThread("render-worker")
        insideTID.withLock { $0 = CPerfSampler_gettid() }
        _ = Workloads.burnCPU(nanoseconds: 30_000_000)
        ended.signal()
      }.start()
      ended.wait()
      usleep(50_000)  // both threads end (or finish burning) before the stop
      let result = session.stop()

      let inside = result.threads.first { $0.threadID == insideTID.withLock { $0 } }
      #expect(inside?.name == "render-worker")
      #expect(inside?.bornDuring == true)
      #expect(inside.map(ProfileBuilder.threadName) == "render-worker")
      let earlyThread = result.threads.first { $0.threadID == beforeTID.withLock { $0 } }
      #expect(earlyThread?.name == "early-named")
      #expect(earlyThread?.bornDuring == false)
    }

    /// As apps do: `Thread.current.name` inside the thread, and again later. A thread has
    /// one name in the report: its latest, read at its end or at the stop.
    @Test(arguments: [true, false])
    func aThreadRenamedWhileRecordingHasItsLatestName(endsBeforeStop: Bool) throws {
      let session = try SamplingSession.start(SamplerConfiguration())
      let tid = Mutex<Int32>(0)
      let renamed = DispatchSemaphore(value: 0)
      let release = DispatchSemaphore(value: 0)
      let ended = DispatchSemaphore(value: 0)
      Thread {
        Thread.current.name = "loader"
        tid.withLock { $0 = CPerfSampler_gettid() }
        _ = Workloads.burnCPU(nanoseconds: 20_000_000)
        Thread.current.name = "decoder"
        _ = Workloads.burnCPU(nanoseconds: 20_000_000)
        renamed.signal()
        if !endsBeforeStop { release.wait() }
        ended.signal()
      }.start()
      renamed.wait()
      if endsBeforeStop {
        ended.wait()
        usleep(20_000)
      }
      let result = session.stop()
      release.signal()
      if !endsBeforeStop { ended.wait() }
      let thread = result.threads.first { $0.threadID == tid.withLock { $0 } }
      #expect(thread?.name == "decoder", "\(String(describing: thread?.name))")
    }

    @Test func hundredOneMillisecondThreadsAreAllSeen() throws {
      let session = try SamplingSession.start(SamplerConfiguration())
      let tids = Mutex<[Int32]>([])
      for _ in 0..<100 {
        let done = DispatchSemaphore(value: 0)
        Thread {
          tids.withLock { $0.append(CPerfSampler_gettid()) }
          _ = Workloads.burnCPU(nanoseconds: 1_000_000)
          done.signal()
        }.start()
        done.wait()
      }
      usleep(20_000)
      let result = session.stop()
      let seen = Dictionary(result.threads.map { ($0.threadID, $0) }, uniquingKeysWith: { $1 })
      let sampled = Set(result.samples.map(\.threadID))
      let mine = tids.withLock { $0 }
      #expect(mine.count == 100)
      let unseen = mine.filter { seen[$0] == nil }
      #expect(unseen.isEmpty, "\(unseen.count) of 100 threads never seen")
      // Each was armed on itself at its start and measured at its end.
      let unmeasured = mine.filter { seen[$0]?.bornDuring != true || (seen[$0]?.cpuNanoseconds ?? 0) < 1_000_000 }
      #expect(
        unmeasured.isEmpty,
        "\(unmeasured.map { (seen[$0]?.bornDuring, seen[$0]?.cpuNanoseconds) }) not measured from their start")
      if Self.perfEvents {
        // One period of CPU time each: the event overflows once in each (sometimes just after
        // the thread's end, when its exit path is not the thread's own time). Measured: 87 of
        // 100 with two test runs sharing 2 cores, 96 to 100 in 8 runs alone; a thread armed late or
        // not at all would not be sampled at all.
        let sampledCount = mine.filter { sampled.contains($0) }.count
        #expect(sampledCount >= 80, "\(sampledCount) of 100 one-millisecond threads sampled")
      }
    }

    @Test func aThreadBlockingSIGPROFIsReportedUnsampled() throws {
      let profiler = TimeProfiler(clock: .cpu, rateHz: 1000)
      try profiler.start()
      let tid = Mutex<Int32>(0)
      let done = DispatchSemaphore(value: 0)
      Thread {
        var block = sigset_t()
        sigemptyset(&block)
        sigaddset(&block, SIGPROF)
        pthread_sigmask(SIG_BLOCK, &block, nil)
        tid.withLock { $0 = CPerfSampler_gettid() }
        _ = Workloads.burnCPU(nanoseconds: 50_000_000)
        done.signal()
      }.start()
      done.wait()
      usleep(20_000)
      profiler.stop()
      let report = try profiler.report()
      let blocked = tid.withLock { $0 }
      let entry = report.unsampled?.first { $0.threadID == blocked }
      #expect(entry?.reason == "blocks SIGPROF")
      #expect((entry?.cpuMilliseconds ?? 0) >= 50)
      #expect(!report.threads.contains { $0.threadID == blocked })
      #expect((report.coveragePercent ?? 100) < 100)
    }

    @Test(.enabled(if: perfEvents, "perf events refused here"))
    func coverageComparesSamplesWithEachThreadsCPUClock() throws {
      let profiler = TimeProfiler(clock: .cpu, rateHz: 1000)
      try profiler.start()
      let tid = Mutex<Int32>(0)
      let done = DispatchSemaphore(value: 0)
      Thread {
        tid.withLock { $0 = CPerfSampler_gettid() }
        _ = Workloads.burnCPU(nanoseconds: 150_000_000)
        done.signal()
      }.start()
      done.wait()
      usleep(20_000)
      profiler.stop()
      let report = try profiler.report()
      #expect(report.sampleSource?.contains("perf-event") == true)
      let thread = report.threads.first { $0.threadID == tid.withLock { $0 } }
      let coverage = try #require(thread?.coveragePercent)
      #expect(coverage > 90 && coverage < 110, "coverage \(coverage) %")
      #expect((thread?.samplesPerCPUSecond ?? 0) >= 800)
      #expect((thread?.cpuMilliseconds ?? 0) >= 150)
    }

    @Test func aReplacedHandlerIsReportedNotHidden() throws {
      let session = try SamplingSession.start(SamplerConfiguration())
      var ignore = sigaction()
      ignore.__sigaction_handler.sa_handler = SIG_IGN
      var ours = sigaction()
      sigaction(SIGPROF, &ignore, &ours)
      _ = Workloads.burnCPU(nanoseconds: 30_000_000)
      let result = session.stop()
      sigaction(SIGPROF, &ours, nil)
      #expect(result.replacedBy == .ignored)
    }

    /// The report lists what the replaced handler left unsampled, with its CPU time, and a
    /// thread too short for one period is counted, not listed.
    @Test func aReplacedHandlerAndShortThreadsInTheReport() throws {
      let profiler = TimeProfiler(clock: .cpu, rateHz: 1000)
      try profiler.start()
      for _ in 0..<3 {
        let done = DispatchSemaphore(value: 0)
        Thread { done.signal() }.start()  // far under one period of CPU time
        done.wait()
      }
      let tid = Mutex<Int32>(0)
      let ready = DispatchSemaphore(value: 0)
      let release = DispatchSemaphore(value: 0)
      let finished = DispatchSemaphore(value: 0)
      Thread {
        tid.withLock { $0 = CPerfSampler_gettid() }
        ready.signal()
        release.wait()
        _ = Workloads.burnCPU(nanoseconds: 50_000_000)
        finished.signal()
      }.start()
      ready.wait()
      var ignore = sigaction()
      ignore.__sigaction_handler.sa_handler = SIG_IGN
      var ours = sigaction()
      sigaction(SIGPROF, &ignore, &ours)
      release.signal()
      finished.wait()
      usleep(20_000)
      profiler.stop()
      sigaction(SIGPROF, &ours, nil)
      let report = try profiler.report()
      #expect(report.signalHandlerNote?.contains("replaced the sampler's SIGPROF handler") == true)
      let entry = report.unsampled?.first { $0.threadID == tid.withLock { $0 } }
      #expect(entry?.reason == "SIGPROF handler replaced by the program", "\(report.unsampled ?? [])")
      #expect((entry?.cpuMilliseconds ?? 0) >= 50)
      #expect((report.shortThreads ?? 0) >= 3, "\(String(describing: report.shortThreads))")
    }
  }
}
