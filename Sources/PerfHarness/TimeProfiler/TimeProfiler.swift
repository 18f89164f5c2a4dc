import CPerfSampler
import Foundation

/// The Time Profiler instrument: samples every thread while recording, then symbolizes
/// and summarises.
final class TimeProfiler {
  private let configuration: SamplerConfiguration
  private var session: SamplingSession?
  private var results: [SamplingResult] = []

  init(clock: SamplingClock, rateHz: Int) {
    configuration = SamplerConfiguration(clock: clock, rateHz: rateHz)
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

    var threads: [TimeProfileReport.ThreadSummary] = []
    for (index, thread) in merged.threads.enumerated() {
      let samples = merged.samples.filter { $0.thread == index }
      let weight = samples.reduce(0) { $0 + $1.weight }
      threads.append(
        .init(
          name: thread.name, threadID: thread.threadID, isMain: thread.isMain,
          sampleCount: samples.reduce(0) { $0 + $1.sampleCount },
          weightMilliseconds: weight, percent: totalWeight > 0 ? weight / totalWeight * 100 : 0,
          topFunctions: merged.topFunctions(threads: [index], hideSystemLibraries: true, limit: 15)))
    }
    threads.sort { ($0.isMain ? 1 : 0, $0.weightMilliseconds) > ($1.isMain ? 1 : 0, $1.weightMilliseconds) }

    return TimeProfileReport(
      clock: configuration.clock.rawValue, sampleRateHz: configuration.rateHz,
      sampleCount: results.reduce(0) { $0 + $1.samples.count },
      lostSamples: results.reduce(0) { $0 + $1.lostSamples },
      signalsReceived: results.reduce(0) { $0 + $1.signalsReceived },
      totalWeightMilliseconds: totalWeight,
      durationMilliseconds: results.reduce(0) { $0 + Double($1.stopNanoseconds &- $1.startNanoseconds) / 1e6 },
      handlerMedianMicroseconds: percentile(handlerNanoseconds, 0.5) / 1000,
      handlerP90Microseconds: percentile(handlerNanoseconds, 0.9) / 1000,
      medianStackDepth: Int(percentile(results.flatMap { $0.samples.map { UInt32($0.frames.count) } }.sorted(), 0.5)),
      symbolizationMilliseconds: symbolization.milliseconds, uniqueAddresses: builder.uniqueAddresses,
      threads: threads, topFunctions: merged.topFunctions(hideSystemLibraries: true, limit: 25), profile: merged)
  }

  private func percentile(_ sorted: [UInt32], _ fraction: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * fraction))])
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
