import CPerfSampler
import Foundation

/// The Time Profiler instrument: samples every thread while recording, then symbolizes
/// and summarises.
final class TimeProfiler {
  private let configuration: SamplerConfiguration
  private var session: SamplingSession?
  private var results: [SamplingResult] = []

  /// ditherPeriod nil: dithered unless PERFHARNESS_DITHER=0.
  init(clock: SamplingClock, rateHz: Int, asyncStacks: Bool = true, ditherPeriod: Bool? = nil) {
    var configuration = SamplerConfiguration(clock: clock, rateHz: rateHz)
    configuration.physicalStacksOnly = !asyncStacks
    // Where perf events are allowed but unwanted (a kernel whose cpu-clock events
    // misbehave, or to compare the two sources): PERFHARNESS_SAMPLE_SOURCE=timer. Read with
    // getenv: ProcessInfo's environment allocates, which moves the heap a leak scan reads.
    configuration.timersOnly = getenv("PERFHARNESS_SAMPLE_SOURCE").map { String(cString: $0) == "timer" } ?? false
    // Fixed periods, to show what dithering is for (the bench's before row).
    configuration.ditherPeriod =
      ditherPeriod ?? getenv("PERFHARNESS_DITHER").map { String(cString: $0) != "0" } ?? true
    self.configuration = configuration
  }

  func start() throws {
    guard session == nil else { return }
    session = try SamplingSession.start(configuration)
  }

  /// Mutes sampling for the harness's own work, which is not the program's time. (With
  /// system libraries hidden it would be charged to the program's code that called the
  /// harness.)
  func setMuted(_ muted: Bool) {
    CPerfSampler_setMuted(muted ? 1 : 0)
  }

  /// Stops sampling without collecting the samples yet (see ``SamplingSession/halt()``).
  func halt() {
    session?.halt()
  }

  func stop() {
    guard let session else { return }
    results.append(session.stop())
    self.session = nil
  }

  /// Symbolizes what was recorded. Call after the last `stop()`.
  func report() throws -> TimeProfileReport {
    let symbolizeStart = ContinuousClock.now
    var builder = ProfileBuilder(symbolizer: try Symbolizer())
    var profile: Profile?
    for result in results {
      let part = builder.build(from: result)
      profile = profile.map { $0.appending(part) } ?? part
    }
    let symbolization = ContinuousClock.now - symbolizeStart
    let merged =
      profile
      ?? Profile(frames: [], threads: [], samples: [], sampleIntervalMilliseconds: 1000 / Double(configuration.rateHz))
    let handlerNanoseconds = results.flatMap { $0.samples.map(\.handlerNanoseconds) }.sorted()
    let totalWeight = merged.samples.reduce(0) { $0 + $1.weight }

    let facts = ThreadFacts.merge(results)
    let measuresCPU = configuration.clock == .cpu
    var threads: [TimeProfileReport.ThreadSummary] = []
    for (index, thread) in merged.threads.enumerated() {
      let samples = merged.samples.filter { $0.thread == index }
      let weight = samples.reduce(0) { $0 + $1.weight }
      let sampleCount = samples.reduce(0) { $0 + $1.sampleCount }
      let fact = facts[thread.threadID]
      let cpu = measuresCPU ? fact?.cpuMilliseconds : nil
      threads.append(
        .init(
          name: thread.name, threadID: thread.threadID, isMain: thread.isMain,
          sampleCount: sampleCount,
          weightMilliseconds: weight, percent: totalWeight > 0 ? weight / totalWeight * 100 : 0,
          topFunctions: merged.topFunctions(threads: [index], hideSystemLibraries: true, limit: 15),
          source: fact?.source?.rawValue, cpuMilliseconds: cpu,
          coveragePercent: cpu.flatMap { $0 > 0 ? weight / $0 * 100 : nil },
          samplesPerCPUSecond: cpu.flatMap { $0 > 0 ? Double(sampleCount) / ($0 / 1000) : nil }))
    }
    threads.sort { ($0.isMain ? 1 : 0, $0.weightMilliseconds) > ($1.isMain ? 1 : 0, $1.weightMilliseconds) }
    let coverage = Coverage(
      facts: facts, sampled: Set(merged.threads.map(\.threadID)),
      periodMilliseconds: 1000 / Double(configuration.rateHz),
      replaced: results.compactMap(\.replacedBy).first)
    let sampledCPU = threads.compactMap(\.cpuMilliseconds).reduce(0, +)
    let sampledWithCPU = threads.filter { $0.cpuMilliseconds != nil }.reduce(0) { $0 + $1.sampleCount }
    let sources = Set(facts.values.compactMap(\.source))

    return TimeProfileReport(
      clock: configuration.clock.rawValue, sampleRateHz: configuration.rateHz,
      sampleCount: results.reduce(0) { $0 + $1.samples.count },
      lostSamples: results.reduce(0) { $0 + $1.lostSamples },
      signalsReceived: results.reduce(0) { $0 + $1.signalsReceived },
      totalWeightMilliseconds: totalWeight,
      durationMilliseconds: results.reduce(0) { $0 + Double($1.stopNanoseconds &- $1.startNanoseconds) / 1e6 },
      handlerMedianMicroseconds: Statistics.percentile(sorted: handlerNanoseconds, 0.5) / 1000,
      handlerP90Microseconds: Statistics.percentile(sorted: handlerNanoseconds, 0.9) / 1000,
      medianStackDepth: Int(
        Statistics.percentile(sorted: results.flatMap { $0.samples.map { UInt32($0.frames.count) } }.sorted(), 0.5)),
      symbolizationMilliseconds: symbolization.milliseconds, uniqueAddresses: builder.uniqueAddresses,
      threads: threads, topFunctions: merged.topFunctions(hideSystemLibraries: true, limit: 25), profile: merged,
      sampleSource: sources.isEmpty ? nil : sources.map(\.rawValue).sorted().joined(separator: "+"),
      sampleSourceNote: sourceNote(sources: sources),
      samplesPerCPUSecond: measuresCPU && sampledCPU > 0 ? Double(sampledWithCPU) / (sampledCPU / 1000) : nil,
      cpuMilliseconds: measuresCPU ? coverage.cpuMilliseconds : nil,
      coveragePercent: measuresCPU && coverage.cpuMilliseconds > 0
        ? totalWeight / coverage.cpuMilliseconds * 100 : nil,
      unsampled: measuresCPU ? coverage.unsampled : Self.unsignalled(results),
      shortThreads: measuresCPU ? coverage.shortThreads : nil,
      shortThreadsCPUMilliseconds: measuresCPU ? coverage.shortMilliseconds : nil,
      signalHandlerNote: signalHandlerNote(), periodDithered: configuration.ditherPeriod)
  }

  /// Wall clock: each thread's time blocked where a tick would have made its call fail.
  static func unsignalled(_ results: [SamplingResult]) -> [TimeProfileReport.UnsampledThread] {
    var blocked: [Int32: (name: String, nanoseconds: UInt64, call: Int32)] = [:]
    for result in results {
      for thread in result.threads where thread.unsignalledNanoseconds > 0 {
        let previous = blocked[thread.threadID]?.nanoseconds ?? 0
        blocked[thread.threadID] = (
          ProfileBuilder.threadName(thread), previous + thread.unsignalledNanoseconds, thread.unsignalledSyscall
        )
      }
    }
    return blocked.sorted { $0.key < $1.key }.map { threadID, entry in
      .init(
        name: entry.name, threadID: threadID, cpuMilliseconds: nil,
        blockedMilliseconds: Double(entry.nanoseconds) / 1e6,
        reason: "blocked in \(SystemCallName.of(entry.call)), not signalled (the call would fail with EINTR)")
    }
  }

  private func sourceNote(sources: Set<SampleSource>) -> String? {
    guard let errno = results.map(\.perfErrno).first(where: { $0 != 0 }), sources.contains(.timer) else {
      if configuration.clock == .wall {
        return configuration.timersOnly
          ? "wall clock: CLOCK_MONOTONIC timers per thread (blocking calls may fail with EINTR)"
          : "wall clock: ticks to running threads and to threads in futex waits without a timeout"
      }
      return configuration.timersOnly ? "timers requested" : nil
    }
    return "perf_event_open or its ring failed (\(String(cString: strerror(errno))), errno \(errno)): "
      + "threads got CPU-time timers, which fire on the kernel's ticks (fewer samples, each weighted)"
  }

  private func signalHandlerNote() -> String? {
    if let replaced = results.compactMap(\.replacedBy).first {
      let now =
        switch replaced {
        case .handler: "its own handler"
        case .ignored: "SIG_IGN"
        case .default: "SIG_DFL"
        }
      return "the program replaced the sampler's SIGPROF handler with \(now) while recording: "
        + "no samples from then on"
    }
    switch results.first?.previousDisposition {
    case .handler?:
      return "the program has its own SIGPROF handler: the sampler's runs first and passes it every SIGPROF "
        + "that is not the sampler's"
    case .ignored?:
      return "the program ignores SIGPROF: SIGPROFs that are not the sampler's stay ignored"
    default: return nil
    }
  }
}

extension Profile {
  /// This profile followed by `other`'s samples (threads matched by thread ID).
  func appending(_ other: Profile) -> Profile {
    var result = self
    var frameIndex = Dictionary(frames.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
    let frameMap = other.frames.map { frame -> Int in
      if let index = frameIndex[frame] { return index }
      result.frames.append(frame)
      frameIndex[frame] = result.frames.count - 1
      return result.frames.count - 1
    }
    let threadMap = other.threads.map { thread -> Int in
      if let index = result.threads.firstIndex(where: { $0.threadID == thread.threadID }) { return index }
      result.threads.append(thread)
      return result.threads.count - 1
    }
    result.samples += other.samples.map {
      ProfileSample(
        thread: threadMap[$0.thread], weight: $0.weight, stack: $0.stack.map { frameMap[$0] }, timestamp: $0.timestamp,
        count: $0.count)
    }
    return result
  }
}

/// Per thread over every recording of a run: what the coverage is measured against.
struct ThreadFacts {
  var name: String
  var isMain: Bool
  var source: SampleSource?
  var cpuNanoseconds: UInt64?
  var blocksSignal: Bool

  var cpuMilliseconds: Double? { cpuNanoseconds.map { Double($0) / 1e6 } }

  static func merge(_ results: [SamplingResult]) -> [Int32: ThreadFacts] {
    var facts: [Int32: ThreadFacts] = [:]
    for result in results {
      for thread in result.threads {
        let name = ProfileBuilder.threadName(thread)
        guard var fact = facts[thread.threadID] else {
          facts[thread.threadID] = ThreadFacts(
            name: name, isMain: thread.isMain, source: thread.source, cpuNanoseconds: thread.cpuNanoseconds,
            blocksSignal: thread.blocksSignal)
          continue
        }
        fact.name = name
        fact.source = fact.source == .perfEvent ? .perfEvent : thread.source ?? fact.source
        fact.cpuNanoseconds = thread.cpuNanoseconds.map { $0 + (fact.cpuNanoseconds ?? 0) } ?? fact.cpuNanoseconds
        fact.blocksSignal = fact.blocksSignal || thread.blocksSignal
        facts[thread.threadID] = fact
      }
    }
    return facts
  }
}

/// The CPU time the samples should add up to, and the threads that have none.
struct Coverage {
  var cpuMilliseconds: Double = 0
  var unsampled: [TimeProfileReport.UnsampledThread] = []
  var shortThreads = 0
  var shortMilliseconds: Double = 0

  init(facts: [Int32: ThreadFacts], sampled: Set<Int32>, periodMilliseconds: Double, replaced: SignalDisposition?) {
    for (threadID, fact) in facts.sorted(by: { $0.key < $1.key }) {
      let cpu = fact.cpuMilliseconds
      cpuMilliseconds += cpu ?? 0
      guard !sampled.contains(threadID) else { continue }
      // Under one period of CPU time, no sample is no failure: counted, not listed.
      if let cpu, cpu > 0, cpu < periodMilliseconds {
        shortThreads += 1
        shortMilliseconds += cpu
        continue
      }
      let reason: String
      if fact.blocksSignal, cpu != nil {
        reason = "blocks SIGPROF"
      } else if replaced != nil, (cpu ?? 0) >= periodMilliseconds {
        reason = "SIGPROF handler replaced by the program"
      } else if fact.source == nil, (cpu ?? 0) >= periodMilliseconds {
        reason = "not armed"
      } else if let cpu, cpu >= periodMilliseconds {
        reason = "no sample"
      } else {
        continue  // used no CPU time while recording
      }
      unsampled.append(
        .init(name: fact.name, threadID: threadID, cpuMilliseconds: cpu, blockedMilliseconds: nil, reason: reason))
    }
  }
}

/// x86-64 system call names, for the blocking calls a wall-clock report names.
enum SystemCallName {
  static let names: [Int32: String] = [
    0: "read", 1: "write", 7: "poll", 23: "select", 34: "pause", 35: "nanosleep", 45: "recvfrom", 47: "recvmsg",
    128: "rt_sigtimedwait", 130: "rt_sigsuspend", 202: "futex (with a timeout)", 230: "clock_nanosleep",
    232: "epoll_wait", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 441: "epoll_pwait2",
  ]

  static func of(_ number: Int32) -> String {
    number < 0 ? "no system call" : names[number] ?? "system call \(number)"
  }
}
