/// Runs one scenario under the instruments and turns the recording into a report.
@MainActor
public struct ScenarioRunner {
  public var configuration: RecordingConfiguration
  /// Told when the scenario's body starts and ends, so that a process about to die (a
  /// crash, a stop on --timeout) can still hand over the report of the run so far.
  public var interruptions: (any ScenarioInterruptions)?

  public init(configuration: RecordingConfiguration, interruptions: (any ScenarioInterruptions)? = nil) {
    self.configuration = configuration
    self.interruptions = interruptions
  }

  /// Runs `scenario` on the calling thread, which must be the main thread: the code under
  /// test sees a real main thread and main queue.
  /// - Returns: the report; a scenario that throws gives a `crashed` report with the error.
  public func run(_ scenario: Scenario, variant: ScenarioVariant, iterations: Int) -> Report {
    precondition(iterations > 0, "iterations must be positive")
    let run = Run(
      scenario: scenario, variant: variant, configuration: configuration,
      context: ScenarioContext(
        variant: variant, iterations: iterations, recording: Recording(configuration: configuration)))
    // Armed before recording starts: arming allocates, and that is the harness's, not the scenario's.
    interruptions?.scenarioWillStart(PartialReport(run))
    var status = RunStatus.passed
    var failure: String?
    do {
      try run.recording.start()
      do {
        try scenario.body(run.context)
      } catch {
        status = .crashed
        failure = "the scenario threw: \(error)"
      }
    } catch {
      status = .crashed
      failure = "the instruments could not start: \(error)"
      interruptions?.harnessFailed(failure!)
    }
    interruptions?.scenarioDidEnd()
    if configuration.memoryWarningAtEnd && status == .passed {
      run.context.simulateMemoryWarning()
    }
    // From here on only the harness's own code runs on this thread, and what it allocates
    // is not the scenario's.
    AllocationRecorder.ignoringAllocations { interruptions?.scenarioWillBeReported() }
    run.recording.finish()
    return run.report(status: status, failure: failure)
  }
}

/// What the harness's process does around a scenario's body to survive its crash.
@MainActor
public protocol ScenarioInterruptions {
  /// Called on the main thread just before recording starts.
  /// - Parameter partialReport: builds the report of the run as far as it got.
  func scenarioWillStart(_ partialReport: PartialReport)
  /// Called on the main thread when the body has returned or thrown; `partialReport` must
  /// not be called after this returns.
  func scenarioDidEnd()
  /// Called on the main thread when the harness's own work failed (the instruments could
  /// not start): the run goes on as a crashed one unless this does not return.
  func harnessFailed(_ reason: String)
  /// Called on the main thread once the scenario's code (its body, and its observers of a
  /// memory warning) is done, before the instruments stop and the report is built.
  func scenarioWillBeReported()
}

extension ScenarioInterruptions {
  public func harnessFailed(_ reason: String) {}
  public func scenarioWillBeReported() {}
}

/// The report of a run that did not end: what it recorded until it was interrupted.
public struct PartialReport: @unchecked Sendable {
  private let run: Run

  fileprivate init(_ run: Run) { self.run = run }

  /// Stops the instruments (without a leak scan: the other threads of a dying process
  /// cannot be stopped) and builds the report, status `crashed`, steps and marks so far.
  ///
  /// Call it from another thread while the main thread is stopped (parked in a signal
  /// handler) and only once: it reads the main actor's state without the main actor,
  /// which is sound only because the main thread cannot run meanwhile.
  /// - Parameter error: why the run ended, for the report's `error`.
  public func build(error: String) -> Report {
    typealias Build = () -> Report
    let onMainActor: @MainActor () -> Report = { [run] in
      run.recording.finishAfterCrash()
      let skipped =
        run.configuration.instruments.contains(.leaks) ? "; the leaks instrument did not scan a dying process" : ""
      return run.report(status: .crashed, failure: error + skipped)
    }
    return unsafeBitCast(onMainActor, to: Build.self)()
  }
}

/// One scenario run's state, from arming to the report.
@MainActor
private final class Run {
  let scenario: Scenario
  let variant: ScenarioVariant
  let configuration: RecordingConfiguration
  let context: ScenarioContext
  let start = ContinuousClock.now
  var recording: Recording { context.recording }

  init(scenario: Scenario, variant: ScenarioVariant, configuration: RecordingConfiguration, context: ScenarioContext) {
    self.scenario = scenario
    self.variant = variant
    self.configuration = configuration
    self.context = context
  }

  /// The report of the finished recording.
  func report(status: RunStatus, failure: String?) -> Report {
    let wallTime = ContinuousClock.now - start
    let sections = recording.sections()
    return Report(
      schemaVersion: Report.currentSchemaVersion,
      tool: .init(name: "perfharness", version: PerfHarnessVersion.current),
      environment: .current(),
      scenario: .init(
        name: scenario.name, variant: variant.rawValue, iterations: context.iterations,
        instruments: Instrument.allCases.filter(configuration.instruments.contains)),
      status: status, error: sections.failure(after: failure), wallTimeMilliseconds: wallTime.milliseconds,
      steps: StepSummary.summaries(of: context.steps), marks: recording.marks, checks: [],
      timeProfile: sections.timeProfile, allocations: sections.allocations, leaks: sections.leaks, crash: nil)
  }
}

/// The harness's version, written into every report.
public enum PerfHarnessVersion {
  public static let current = "0.1.0"
}
