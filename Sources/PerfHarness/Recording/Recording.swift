/// The instruments' recording of one scenario run: started before the scenario's body,
/// stopped after it, with generation marks in between.
@MainActor
final class Recording {
  let configuration: RecordingConfiguration
  private(set) var isRecording = false
  private(set) var marks: [GenerationMark] = []
  private let clockStart = ContinuousClock.now

  init(configuration: RecordingConfiguration) {
    self.configuration = configuration
  }

  func start() {
    guard !isRecording else { return }
    isRecording = true
  }

  func stop() {
    guard isRecording else { return }
    isRecording = false
  }

  func markGeneration(label: String, isMemoryWarning: Bool = false) {
    let elapsed = ContinuousClock.now - clockStart
    marks.append(
      GenerationMark(
        index: marks.count, label: label, timeMilliseconds: elapsed.milliseconds,
        isMemoryWarning: isMemoryWarning))
  }
}

/// What to record and how.
public struct RecordingConfiguration: Sendable {
  public var instruments: Set<Instrument>
  public var sampleRateHz: Int

  public init(instruments: Set<Instrument> = Set(Instrument.available), sampleRateHz: Int = 1000) {
    self.instruments = instruments
    self.sampleRateHz = sampleRateHz
  }
}

extension Duration {
  var milliseconds: Double {
    let (seconds, attoseconds) = components
    return Double(seconds) * 1000 + Double(attoseconds) / 1e15
  }
}
