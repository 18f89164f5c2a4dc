/// The instruments' recording of one scenario run: started before the scenario's body,
/// stopped after it, with generation marks in between.
@MainActor
final class Recording {
  let configuration: RecordingConfiguration
  private(set) var isRecording = false
  private(set) var marks: [GenerationMark] = []
  private let clockStart = ContinuousClock.now
  private let timeProfiler: TimeProfiler?

  init(configuration: RecordingConfiguration) {
    self.configuration = configuration
    timeProfiler =
      configuration.instruments.contains(.time)
      ? TimeProfiler(clock: configuration.clock, rateHz: configuration.sampleRateHz) : nil
  }

  func start() throws {
    guard !isRecording else { return }
    try timeProfiler?.start()
    isRecording = true
  }

  func stop() {
    guard isRecording else { return }
    timeProfiler?.stop()
    isRecording = false
  }

  func markGeneration(label: String, isMemoryWarning: Bool = false) {
    let elapsed = ContinuousClock.now - clockStart
    marks.append(
      GenerationMark(
        index: marks.count, label: label, timeMilliseconds: elapsed.milliseconds,
        isMemoryWarning: isMemoryWarning))
  }

  /// The instruments' sections of the report. Call after the last `stop()`.
  func timeProfileReport() throws -> TimeProfileReport? {
    try timeProfiler?.report()
  }
}

/// What to record and how.
public struct RecordingConfiguration: Sendable {
  public var instruments: Set<Instrument>
  public var sampleRateHz: Int
  public var clock: SamplingClock

  public init(
    instruments: Set<Instrument> = Set(Instrument.available), sampleRateHz: Int = 1000, clock: SamplingClock = .cpu
  ) {
    self.instruments = instruments
    self.sampleRateHz = sampleRateHz
    self.clock = clock
  }
}

extension Duration {
  var milliseconds: Double {
    let (seconds, attoseconds) = components
    return Double(seconds) * 1000 + Double(attoseconds) / 1e15
  }
}
