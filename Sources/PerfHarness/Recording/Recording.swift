import CPerfAlloc

/// The instruments' recording of one scenario run (or of a whole program, for `record`):
/// started before the scenario's body, stopped after it, with generation marks in between.
///
/// Not the main actor's: a scenario calls it from the main thread, but a preloaded
/// program's recording is marked from the recorder's own thread and reported from its
/// crash reporter's, where main-actor code traps. Callers serialize their calls: the
/// scenario runner by running on the main thread, `ProgramRecording` by its lock.
final class Recording: @unchecked Sendable {
  let configuration: RecordingConfiguration
  private(set) var isRecording = false
  private(set) var marks: [GenerationMark] = []
  private let clockStart = ContinuousClock.now
  private let timeProfiler: TimeProfiler?
  private var allocationRecorder: AllocationRecorder?
  private(set) var allocationRecording: AllocationRecording?
  private var leaksResult: Result<LeaksReport, any Error>?
  private var heapSnapshot: HeapSnapshot?
  private var leakChecks: [LeaksReport.Check] = []
  private var checkSymbolizer: Symbolizer?

  init(configuration: RecordingConfiguration) {
    self.configuration = configuration
    timeProfiler =
      configuration.instruments.contains(.time)
      ? TimeProfiler(
        clock: configuration.clock, rateHz: configuration.sampleRateHz, asyncStacks: configuration.asyncStacks) : nil
  }

  func start() throws {
    guard !isRecording else { return }
    if allocationRecorder != nil {
      // Resuming after stop(): the recorder ran on, paused.
      try timeProfiler?.start()
      _ = CPerfAlloc_setPaused(0)
      isRecording = true
      return
    }
    // The time profiler first: its session objects would otherwise be counted as the
    // scenario's persistent allocations.
    try timeProfiler?.start()
    let tracksBlocks = configuration.instruments.contains(.allocations) || configuration.instruments.contains(.leaks)
    if tracksBlocks && allocationRecorder == nil && allocationRecording == nil {
      // Taking the heap snapshot and mapping the recorder's tables took 11-22 ms of a
      // small scenario's samples before it was muted.
      timeProfiler?.setMuted(true)
      defer { timeProfiler?.setMuted(false) }
      if configuration.instruments.contains(.leaks) {
        heapSnapshot = HeapSnapshot.take()
        heapSnapshot?.reserveDanglingAddresses()
        _ = HeapGraph.taskSlabMetadata
      }
      do {
        allocationRecorder = try AllocationRecorder.start(mode: configuration.allocationMode)
      } catch {
        timeProfiler?.stop()
        throw error
      }
    }
    isRecording = true
  }

  /// Pauses every instrument until `start()`: no sample is taken and no allocation is the
  /// scenario's. The allocation recorder still sees frees, so a block it counted that is
  /// freed meanwhile leaves the counts; with the leaks instrument, blocks allocated while
  /// paused are known to the scan as blocks from before the recording.
  func stop() {
    guard isRecording else { return }
    timeProfiler?.stop()
    if allocationRecorder != nil { _ = CPerfAlloc_setPaused(1) }
    isRecording = false
  }

  /// Ends every instrument for good.
  func finish() {
    // No more samples: what follows is the harness's work (collecting and naming the
    // blocks, the leak scan), which would otherwise be sampled and, with system libraries
    // hidden, charged to the scenario's code that called the runner. Halting allocates
    // nothing; the sampler's stop, which allocates its sample arrays, comes after the
    // allocations stopped. The sampler's own thread also unwinds from copies of the profiled
    // threads' stacks: its stack would read as a root full of stale references to a scan.
    timeProfiler?.halt()
    if let allocationRecorder {
      // The harness's own allocations below are ignored per thread; a pause the scenario
      // left on would keep the other threads' blocks from the counts and the graph.
      _ = CPerfAlloc_setPaused(0)
      if configuration.instruments.contains(.leaks) {
        // The scan needs the blocks still live. Everything it allocates (the symbolizer
        // too) comes after the stop, so it is not part of the graph.
        do {
          // This thread ran the scenario and returned from it: what the scenario keeps
          // alive is in objects (the context, the recording) and globals, while its dead
          // frames below and the older frames above hold stale words.
          var options = HeapGraph.Options()
          options.scanCallerStack = false
          options.snapshot = heapSnapshot
          let (recording, leaks) = try LeakAnalysis.stopAndScan(
            recorder: allocationRecorder, symbolizer: try Symbolizer(), suppressions: configuration.leakSuppressions,
            options: options)
          allocationRecording = recording
          var withChecks = leaks
          withChecks.danglingAddresses = heapSnapshot?.releaseDanglingAddresses()
          withChecks.checks = leakChecks.isEmpty ? nil : leakChecks
          leaksResult = .success(withChecks)
        } catch {
          allocationRecording = allocationRecorder.stop()
          leaksResult = .failure(error)
        }
        _ = heapSnapshot?.releaseDanglingAddresses()
      } else {
        allocationRecording = allocationRecorder.stop()
      }
      self.allocationRecorder = nil
      heapSnapshot = nil
    }
    stop()
  }

  /// Ends every instrument in a process that is about to die: no leak scan, since its
  /// other threads (one of them crashed) cannot be parked.
  func finishAfterCrash() {
    timeProfiler?.halt()
    if let allocationRecorder {
      allocationRecording = allocationRecorder.stop()
      self.allocationRecorder = nil
      _ = heapSnapshot?.releaseDanglingAddresses()
    }
    stop()
  }

  func markGeneration(label: String, isMemoryWarning: Bool = false) {
    let elapsed = ContinuousClock.now - clockStart
    allocationRecorder?.markGeneration(label: label)
    AllocationRecorder.ignoringAllocations {
      marks.append(
        GenerationMark(
          index: marks.count, label: label, timeMilliseconds: elapsed.milliseconds,
          isMemoryWarning: isMemoryWarning))
    }
    if configuration.leakCheckAtMarks { checkLeaks(label: label) }
  }

  /// Builds the memory graph now, while recording goes on, and keeps what had leaked by
  /// then for the report. Only with the leaks instrument recording. The calling thread's
  /// allocations are not recorded meanwhile (they are the harness's); its stack is a root,
  /// since the scenario's frames above this call are live.
  func checkLeaks(label: String) {
    guard isRecording, configuration.instruments.contains(.leaks), let allocationRecorder else { return }
    // Muted without a closure, as at the start: this thread's stack is a root of the scan,
    // and frames added here would hold stale words of the blocks the scenario just made (a
    // check missed a fresh cycle in 2 runs of 5 that way).
    timeProfiler?.setMuted(true)
    defer { timeProfiler?.setMuted(false) }
    let started = ContinuousClock.now
    let previous = CPerfAlloc_setIgnoringAllocations(1)
    defer { _ = CPerfAlloc_setIgnoringAllocations(previous) }
    AllocationRecorder.watchFrees()
    defer { AllocationRecorder.endWatchingFrees() }
    guard let checkpoint = allocationRecorder.checkpoint() else { return }
    var options = HeapGraph.Options()
    options.snapshot = heapSnapshot
    options.leavesOutFreedBlocks = true
    var freedMeanwhile = 0
    do {
      if checkSymbolizer == nil { checkSymbolizer = try Symbolizer() }
      let report = try LeakAnalysis.scan(
        recording: checkpoint, symbolizer: checkSymbolizer, suppressions: configuration.leakSuppressions,
        options: options,
        stillLive: {
          let live = allocationRecorder.checkpoint().map { Set($0.liveBlocks) } ?? []
          freedMeanwhile = checkpoint.liveBlocks.count { !live.contains($0) }
          return live
        },
        // A check keeps counts and cycles only; paths from the roots are the final report's.
        describesRetainers: false)
      leakChecks.append(
        LeaksReport.Check(
          label: label, generation: marks.count, timeMilliseconds: (started - clockStart).milliseconds,
          leakedCount: report.leakedCount, leakedBytes: report.leakedBytes,
          cycles: report.cycles.map { LeaksReport.CycleCount(types: $0.nodes.map(\.type), instances: $0.instances) },
          rootLeaks: report.rootLeaks.map { LeaksReport.TypeCount(type: $0.type, count: $0.count, bytes: $0.bytes) },
          indirectLeakCount: report.indirectLeakCount, blocksScanned: report.blocksScanned,
          freedDuringCheck: freedMeanwhile, unscannedThreads: report.unscannedThreads,
          blockedThreads: report.blockedThreads ?? 0,
          analysisMilliseconds: (ContinuousClock.now - started).milliseconds))
    } catch {
      // The end-of-run scan reports a scan that cannot run; a check that fails is left out.
    }
  }

  /// The instruments' sections of a report, after `finish()`; a recording that could not be
  /// symbolized gives none of them and says why.
  struct Sections: Sendable {
    var timeProfile: TimeProfileReport?
    var allocations: AllocationsReport?
    var leaks: LeaksReport?
    var failure: String?

    /// `failure`, after `earlier` when there is one. No closure: this runs on the crash
    /// reporter's thread too, where a closure made in main-actor code is checked to run on
    /// the main thread and traps.
    func failure(after earlier: String?) -> String? {
      guard let failure else { return earlier }
      guard let earlier else { return failure }
      return earlier + "; " + failure
    }
  }

  func sections() -> Sections {
    do {
      return Sections(
        timeProfile: try timeProfileReport(), allocations: try allocationsReport(), leaks: try leaksReport())
    } catch {
      return Sections(failure: "the recording could not be symbolized: \(error)")
    }
  }

  /// The instruments' sections of the report. Call after `finish()`.
  func timeProfileReport() throws -> TimeProfileReport? {
    try timeProfiler?.report()
  }

  func leaksReport() throws -> LeaksReport? {
    try leaksResult?.get()
  }

  func allocationsReport() throws -> AllocationsReport? {
    guard configuration.instruments.contains(.allocations), let allocationRecording else { return nil }
    var analysis = AllocationsAnalysis()
    analysis.isAppFrame = CodeOwnership.isAppCode
    return analysis.report(from: allocationRecording, symbolizer: try Symbolizer())
  }
}

/// What to record and how: every setting a recording reads, in one value. The command
/// line builds it from its options, and a scenario's child process receives it whole as a
/// JSON file (`--child-configuration`), so a new setting is added here and to its option
/// only.
public struct RecordingConfiguration: Sendable, Codable, Equatable {
  /// The Time Profiler's rates per thread (the sampler's own limits).
  public static let sampleRates = SamplerConfiguration.rateRange
  public static let defaultSampleRateHz = 1000

  public var instruments: Set<Instrument>
  public var sampleRateHz: Int
  public var clock: SamplingClock
  /// Post the memory-warning notification when the scenario ends, and mark a generation.
  public var memoryWarningAtEnd: Bool
  /// Allocation stacks cost about twice as much as types and counts alone.
  public var allocationStacks: Bool
  /// Leaks the leaks instrument does not report (noise from system libraries).
  public var leakSuppressions: LeakSuppressions = .none
  /// With the leaks instrument: a leak check at every generation mark.
  public var leakCheckAtMarks = false
  /// Stacks taken in Swift concurrency code go on into the awaiting callers (the task's
  /// logical chain); false: the thread's stack only (`--no-async-stacks`).
  public var asyncStacks = true

  public init(
    instruments: Set<Instrument> = Set(Instrument.defaults), sampleRateHz: Int = Self.defaultSampleRateHz,
    clock: SamplingClock = .cpu, memoryWarningAtEnd: Bool = false, allocationStacks: Bool = true,
    leakSuppressions: LeakSuppressions = .none
  ) {
    self.leakSuppressions = leakSuppressions
    self.instruments = instruments
    self.sampleRateHz = sampleRateHz
    self.clock = clock
    self.memoryWarningAtEnd = memoryWarningAtEnd
    self.allocationStacks = allocationStacks
  }

  /// A setting out of its range, named with the values it accepts.
  public struct Invalid: Error, CustomStringConvertible {
    public var setting: String
    public var description: String
  }

  /// Throws `Invalid` for the first setting out of range; `names` maps a setting to what
  /// the user called it (e.g. "sampleRateHz" → "--sample-rate").
  public func validate(names: [String: String] = [:]) throws(Invalid) {
    guard Self.sampleRates.contains(sampleRateHz) else {
      let name = names["sampleRateHz"] ?? "sample rate"
      throw Invalid(
        setting: "sampleRateHz",
        description:
          "\(name) must be between \(Self.sampleRates.lowerBound) and \(Self.sampleRates.upperBound) Hz, got \(sampleRateHz)"
      )
    }
  }

  var allocationMode: AllocationRecordingMode { allocationStacks ? .fullStacks : .countsOnly }
}
