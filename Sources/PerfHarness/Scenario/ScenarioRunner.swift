/// Runs one scenario under the instruments and turns the recording into a report.
@MainActor
public struct ScenarioRunner {
  public var configuration: RecordingConfiguration

  public init(configuration: RecordingConfiguration) {
    self.configuration = configuration
  }

  /// Runs `scenario` on the calling thread, which must be the main thread: the code under
  /// test sees a real main thread and main queue.
  /// - Returns: the report; a scenario that throws gives a `crashed` report with the error.
  public func run(_ scenario: Scenario, variant: ScenarioVariant, iterations: Int) -> Report {
    precondition(iterations > 0, "iterations must be positive")
    let recording = Recording(configuration: configuration)
    let context = ScenarioContext(variant: variant, iterations: iterations, recording: recording)
    let start = ContinuousClock.now
    var status = RunStatus.passed
    var failure: String?
    do {
      try recording.start()
      do {
        try scenario.body(context)
      } catch {
        status = .crashed
        failure = "the scenario threw: \(error)"
      }
    } catch {
      status = .crashed
      failure = "the instruments could not start: \(error)"
    }
    if configuration.memoryWarningAtEnd && status == .passed {
      context.simulateMemoryWarning()
    }
    recording.finish()
    let wallTime = ContinuousClock.now - start
    var timeProfile: TimeProfileReport?
    var allocations: AllocationsReport?
    var leaks: LeaksReport?
    do {
      timeProfile = try recording.timeProfileReport()
      allocations = try recording.allocationsReport()
      leaks = try recording.leaksReport()
    } catch {
      failure = [failure, "the recording could not be symbolized: \(error)"].compactMap { $0 }.joined(separator: "; ")
    }
    return Report(
      schemaVersion: Report.currentSchemaVersion,
      tool: .init(name: "perfharness", version: PerfHarnessVersion.current),
      environment: .current(),
      scenario: .init(
        name: scenario.name, variant: variant.rawValue, iterations: iterations,
        instruments: Instrument.allCases.filter(configuration.instruments.contains)),
      status: status, error: failure, wallTimeMilliseconds: wallTime.milliseconds,
      steps: StepSummary.summaries(of: context.steps), marks: recording.marks, checks: [],
      timeProfile: timeProfile, allocations: allocations, leaks: leaks, crash: nil)
  }
}

/// The harness's version, written into every report.
public enum PerfHarnessVersion {
  public static let current = "0.1.0"
}
