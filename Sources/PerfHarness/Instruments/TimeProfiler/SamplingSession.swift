import CPerfSampler
import Glibc
import Synchronization

/// What drives the sampling timers.
public enum SamplingClock: String, Sendable, CaseIterable, Codable {
  /// Per-thread CPU time: a thread is sampled only while it runs, by a per-thread
  /// cpu-clock perf event (the requested rate) or, where the kernel refuses perf events,
  /// a CPU-time timer (which fires on kernel ticks: fewer signals, heavier weights).
  case cpu
  /// Wall time: blocked threads are sampled too, where a signal cannot make their call
  /// fail with EINTR (a futex wait without timeout: mutexes, conditions, joins); time
  /// blocked elsewhere (nanosleep, poll, ...) is counted per thread, not sampled.
  case wall
}

/// What delivers the samples to a thread.
enum SampleSource: String, Sendable {
  /// A per-thread software cpu-clock perf event, signalled to its thread.
  case perfEvent = "perf-event"
  /// A per-thread POSIX timer (timer_create).
  case timer
  /// Wall clock: ticks queued by the sampler's ticker thread.
  case wallTicks = "wall-tick"
}

struct SamplerConfiguration: Sendable {
  var clock: SamplingClock = .cpu
  /// Timers only, even where perf events are allowed (for comparison and tests).
  var timersOnly = false
  var rateHz: Int = RecordingConfiguration.defaultSampleRateHz
  var maxDepth: Int = 256
  var bufferBytes: Int = 256 << 20
  /// The thread's stack only: no Swift task's awaiting callers (`--no-async-stacks`).
  var physicalStacksOnly = false
  /// Each thread's next sample after a period drawn from 0.5-1.5 times the mean, so work that
  /// repeats at the sampling period is not sampled at one phase of it (docs/sampler.md).
  /// Off only to measure what fixed periods cost (PERFHARNESS_DITHER=0).
  var ditherPeriod = true

  static let rateRange = Int(CPerfSampler_MinRateHz)...Int(CPerfSampler_MaxRateHz)
  static let depthRange = Int(CPerfSampler_MinDepth)...Int(CPerfSampler_MaxDepth)
  static let minimumBufferBytes = Int(CPerfSampler_MinBufferBytes)
}

struct RawSample: Sendable {
  var threadID: Int32
  /// The time this sample stands for: its thread's CPU time since the thread's previous
  /// sample (wall time for a wall-clock tick; 1 + overruns periods for a timer).
  var weightNanoseconds: UInt32
  var weightMilliseconds: Double { Double(weightNanoseconds) / 1e6 }
  var timestampNanoseconds: UInt64
  var handlerNanoseconds: UInt32
  /// Leaf first: frames[0] is the interrupted PC, the rest are return addresses, except
  /// for a Swift task's logical frames (tagged with `CPerfSampler_AsyncFrameTag`: resume
  /// functions' entries, and the marker where the executor's frames begin).
  var frames: [UInt]
}

struct SampledThread: Sendable {
  var threadID: Int32
  var name: String
  var isMain: Bool
  /// nil: never armed (gone before it could be, or no source would take it).
  var source: SampleSource?
  /// SIGPROF was blocked (or pending) on it at its end or at stop.
  var blocksSignal: Bool
  /// Started during the recording.
  var bornDuring: Bool
  /// CPU time the recording could have sampled (from its start or arming to its end or
  /// the stop); nil when it could not be read.
  var cpuNanoseconds: UInt64?
  /// Wall clock: time blocked where a tick would have made its call fail with EINTR, so
  /// not sampled, and the system call it was last blocked in so.
  var unsignalledNanoseconds: UInt64 = 0
  var unsignalledSyscall: Int32 = -1
}

extension SampledThread {
  /// One entry per thread ID. The table can list a tid twice: a scan of /proc/self/task
  /// can miss a live thread while threads come and go, and find it again later, and a tid
  /// can be recycled. Samples carry only the tid, so the entries are one thread to them:
  /// their CPU times add up and the later entry's name wins.
  static func mergingRepeatedIDs(_ threads: [SampledThread]) -> [SampledThread] {
    var merged: [SampledThread] = []
    var position: [Int32: Int] = [:]
    for thread in threads {
      guard let index = position[thread.threadID] else {
        position[thread.threadID] = merged.count
        merged.append(thread)
        continue
      }
      var first = merged[index]
      if !thread.name.isEmpty { first.name = thread.name }
      first.isMain = first.isMain || thread.isMain
      first.source = thread.source ?? first.source
      first.blocksSignal = first.blocksSignal || thread.blocksSignal
      first.bornDuring = first.bornDuring && thread.bornDuring
      if let more = thread.cpuNanoseconds { first.cpuNanoseconds = (first.cpuNanoseconds ?? 0) + more }
      first.unsignalledNanoseconds += thread.unsignalledNanoseconds
      if thread.unsignalledSyscall >= 0 { first.unsignalledSyscall = thread.unsignalledSyscall }
      merged[index] = first
    }
    return merged
  }
}

/// SIGPROF's disposition, as the program set it.
enum SignalDisposition: String, Sendable {
  case `default`, handler, ignored
}

struct SamplingResult: Sendable {
  var configuration: SamplerConfiguration
  var samples: [RawSample]
  var threads: [SampledThread]
  var lostSamples: Int
  var signalsReceived: Int
  var startNanoseconds: UInt64
  var stopNanoseconds: UInt64
  /// errno of the first refused perf event (threads got timers instead), 0 if none.
  var perfErrno: Int32 = 0
  /// The program's SIGPROF disposition before the sampler's handler (chained to or
  /// honoured for signals that are not the sampler's).
  var previousDisposition: SignalDisposition = .default
  /// What the program put in place of the sampler's handler during the recording, if it did.
  var replacedBy: SignalDisposition?
}

/// One recording. Only one session can record at a time in a process; stop it (or drop
/// it) before starting the next.
final class SamplingSession: Sendable {
  let configuration: SamplerConfiguration
  // Guards the one-shot stop so concurrent or repeated stop() calls get the same result.
  private let state = Mutex<SamplingResult?>(nil)

  private init(configuration: SamplerConfiguration) {
    self.configuration = configuration
  }

  static func start(_ configuration: SamplerConfiguration) throws -> SamplingSession {
    try validate(configuration)
    var config = CPerfSampler_Config(
      clock: configuration.clock == .wall
        ? Int32(CPerfSampler_ClockWall.rawValue) : Int32(CPerfSampler_ClockCPU.rawValue),
      rateHz: Int32(configuration.rateHz),
      maxDepth: Int32(configuration.maxDepth),
      source: configuration.timersOnly
        ? Int32(CPerfSampler_SourceTimer.rawValue) : Int32(CPerfSampler_SourceAuto.rawValue),
      bufferBytes: UInt64(configuration.bufferBytes),
      physicalStacksOnly: configuration.physicalStacksOnly ? 1 : 0,
      reserved: 0
    )
    CPerfSampler_setDither(configuration.ditherPeriod ? 1 : 0)
    var error = CPerfSampler_Error()
    let status = CPerfSampler_start(&config, &error)
    guard status == Int32(CPerfSampler_OK.rawValue) else {
      throw SamplingError(
        status: status, error: error, busy: CPerfSampler_ErrorBusy.rawValue, system: CPerfSampler_ErrorSystem.rawValue,
        state: CPerfSampler_ErrorState.rawValue, running: "sampling session")
    }
    return SamplingSession(configuration: configuration)
  }

  /// Stops the timers and the discovery thread without collecting: nothing is allocated,
  /// so a leak scan can follow with no sampler thread (and its stack copies) left to read
  /// as a root. `stop()` collects afterwards.
  func halt() {
    var error = CPerfSampler_Error()
    _ = CPerfSampler_stop(&error)
  }

  /// Stops recording and returns everything recorded. Calling it again returns the same
  /// result.
  func stop() -> SamplingResult {
    state.withLock { cached in
      if let cached { return cached }
      let result = Self.collect(configuration)
      cached = result
      return result
    }
  }

  deinit {
    // A session dropped without stop() must not keep the process's only sampler slot.
    state.withLock { cached in
      if cached == nil { _ = Self.collect(configuration) }
    }
  }

  private static func validate(_ configuration: SamplerConfiguration) throws {
    func invalid(_ message: String) -> SamplingError {
      SamplingError(code: .invalidConfiguration, message: message, errnoValue: nil)
    }
    guard SamplerConfiguration.rateRange.contains(configuration.rateHz) else {
      throw invalid(
        "rateHz \(configuration.rateHz) is out of range; accepted: \(SamplerConfiguration.rateRange.lowerBound)...\(SamplerConfiguration.rateRange.upperBound) Hz"
      )
    }
    guard SamplerConfiguration.depthRange.contains(configuration.maxDepth) else {
      throw invalid(
        "maxDepth \(configuration.maxDepth) is out of range; accepted: \(SamplerConfiguration.depthRange.lowerBound)...\(SamplerConfiguration.depthRange.upperBound) frames"
      )
    }
    guard configuration.bufferBytes >= SamplerConfiguration.minimumBufferBytes else {
      throw invalid(
        "bufferBytes \(configuration.bufferBytes) is too small; accepted: at least \(SamplerConfiguration.minimumBufferBytes) bytes"
      )
    }
  }

  /// Stops the C sampler, copies the arena and thread table out, and releases them.
  private static func collect(_ configuration: SamplerConfiguration) -> SamplingResult {
    var error = CPerfSampler_Error()
    _ = CPerfSampler_stop(&error)
    defer { CPerfSampler_release() }

    var stats = CPerfSampler_Stats()
    CPerfSampler_stats(&stats)

    var samples: [RawSample] = []
    if let arena = CPerfSampler_arena() {
      samples = parseArena(UnsafeRawPointer(arena), usedBytes: Int(stats.usedBytes))
    }

    // Verify mode exists to be read: say what it found (PERFHARNESS_UNWINDER=verify).
    if CPerfSampler_activeUnwinder() == 2 {
      let line =
        "perfharness: unwinder verify: \(CPerfSampler_unwinderMismatches()) of \(CPerfSampler_fastSamples()) fast-path stacks differed from libunwind (\(stats.signalsReceived) signals, \(stats.unwindFallbacks) libunwind fallbacks)\n"
      _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
    }

    var threads: [SampledThread] = []
    let count = CPerfSampler_threadCount()
    threads.reserveCapacity(Int(count))
    for index in 0..<count {
      var info = CPerfSampler_ThreadInfo()
      guard CPerfSampler_threadAt(index, &info) == 0 else { continue }
      // The latest known name: threads (e.g. Dispatch workers) rename themselves.
      let last = cString(info.latestName)
      let name = last.isEmpty ? cString(info.firstName) : last
      let source: SampleSource? =
        switch info.source {
        case Int32(CPerfSampler_SourcePerfEvent.rawValue): .perfEvent
        case Int32(CPerfSampler_SourceTimer.rawValue): .timer
        case Int32(CPerfSampler_SourceWallTicks.rawValue): .wallTicks
        default: nil
        }
      threads.append(
        SampledThread(
          threadID: info.tid, name: name, isMain: info.isMain != 0, source: source,
          blocksSignal: info.blocksSignal != 0, bornDuring: info.bornDuring != 0,
          cpuNanoseconds: info.cpuKnown != 0 ? info.cpuNs : nil, unsignalledNanoseconds: info.unsignalledNs,
          unsignalledSyscall: info.unsignalledSyscall))
    }

    return SamplingResult(
      configuration: configuration,
      samples: samples,
      threads: SampledThread.mergingRepeatedIDs(threads),
      lostSamples: Int(stats.lostSamples),
      signalsReceived: Int(stats.signalsReceived),
      startNanoseconds: stats.startNs,
      stopNanoseconds: stats.stopNs,
      perfErrno: stats.perfErrno,
      previousDisposition: stats.previousHandler == 1 ? .handler : stats.previousHandler == 2 ? .ignored : .default,
      replacedBy: [1: .handler, 2: .ignored, 3: .default][stats.handlerReplaced]
    )
  }

  private static func parseArena(_ base: UnsafeRawPointer, usedBytes: Int) -> [RawSample] {
    let headerSize = MemoryLayout<CPerfSampler_SampleHeader>.size
    var samples: [RawSample] = []
    var offset = 0
    while offset + headerSize <= usedBytes {
      let header = base.load(fromByteOffset: offset, as: CPerfSampler_SampleHeader.self)
      let frameCount = Int(header.frameCount)
      let size = headerSize + frameCount * 8
      // tid 0 marks space reserved by a sample that did not fit (counted as lost).
      guard header.tid != 0, frameCount > 0, offset + size <= usedBytes else { break }
      let frames = UnsafeBufferPointer(
        start: (base + offset + headerSize).assumingMemoryBound(to: UInt64.self), count: frameCount)
      samples.append(
        RawSample(
          threadID: header.tid,
          weightNanoseconds: header.weightNs,
          timestampNanoseconds: header.timestampNs,
          handlerNanoseconds: header.handlerNs,
          frames: frames.map { UInt($0) }
        ))
      offset += size
    }
    return samples
  }

  private static func cString(
    _ tuple: (
      CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar
    )
  ) -> String {
    withUnsafeBytes(of: tuple) { raw in
      let bytes = raw.prefix { $0 != 0 }
      return String(decoding: bytes, as: UTF8.self)
    }
  }
}
