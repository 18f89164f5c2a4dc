import Foundation

/// What a running scenario can ask of the harness: its parameters, named steps, generation
/// marks and simulated memory warnings.
@MainActor
public final class ScenarioContext {
  public let variant: ScenarioVariant
  public let iterations: Int
  let recording: Recording
  private(set) var steps: [StepTiming] = []

  init(variant: ScenarioVariant, iterations: Int, recording: Recording) {
    self.variant = variant
    self.iterations = iterations
    self.recording = recording
  }

  /// Runs one named step and records its wall time.
  @discardableResult
  public func step<Result>(_ name: String, _ body: () throws -> Result) rethrows -> Result {
    let start = ContinuousClock.now
    defer { recordStep(name, since: start) }
    return try body()
  }

  /// Runs one named step that awaits and records its wall time, suspensions included (the
  /// user waits through them too).
  @discardableResult
  public func step<Result>(_ name: String, _ body: @MainActor () async throws -> Result) async rethrows -> Result {
    let start = ContinuousClock.now
    defer { recordStep(name, since: start) }
    return try await body()
  }

  private func recordStep(_ name: String, since start: ContinuousClock.Instant) {
    let timing = StepTiming(name: AllocationRecorder.harnessCopy(name), duration: ContinuousClock.now - start)
    AllocationRecorder.ignoringAllocations { steps.append(timing) }
  }

  /// Marks a generation, like Instruments' Mark Generation button: memory allocated from
  /// here to the next mark belongs to this generation.
  public func markGeneration(_ label: String) {
    recording.markGeneration(label: AllocationRecorder.harnessCopy(label))
  }

  /// Builds the memory graph now, like a leak check of Instruments' Leaks instrument, and
  /// adds what had leaked by then to the report's `leaks.checks` (with the leaks
  /// instrument recording; otherwise nothing happens).
  public func checkLeaks(_ label: String) {
    recording.checkLeaks(label: AllocationRecorder.harnessCopy(label))
  }

  /// Posts the system's memory-warning notification (as the simulator's Simulate Memory
  /// Warning does), then marks a generation after it.
  public func simulateMemoryWarning() {
    NotificationCenter.default.post(name: MemoryWarning.notificationName, object: nil)
    recording.markGeneration(label: MemoryWarning.generationLabel, isMemoryWarning: true)
  }

  /// Starts recording again after `stopRecording()`; recording starts before the scenario
  /// runs.
  public func startRecording() throws { try recording.start() }

  /// Pauses every instrument, for set-up work that should not be measured, until
  /// `startRecording()`: the Time Profiler takes no samples, and nothing allocated
  /// meanwhile (on any thread) is counted by Allocations or reported by Leaks. Frees are
  /// still seen: an object allocated while recording and freed while paused is not
  /// persistent. Generation marks still mark; `checkLeaks` does nothing while paused.
  public func stopRecording() { recording.stop() }
}

/// The memory-warning notification the harness posts: the name iOS gives it, so code under
/// test observes it as an app would.
public enum MemoryWarning {
  public static let notificationName = Notification.Name("UIApplicationDidReceiveMemoryWarningNotification")
  static let generationLabel = "Memory warning"
}

struct StepTiming: Sendable {
  var name: String
  var duration: Duration
}
