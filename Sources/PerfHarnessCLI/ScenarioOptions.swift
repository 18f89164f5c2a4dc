import ArgumentParser
import Foundation
import PerfHarness

/// The options of `scenario`: the shared recording options and what only a scenario has.
struct ScenarioOptions: ParsableArguments {
  @OptionGroup var recording: RecordingOptions<ScenarioSubject>

  /// nil when `--instruments` was not given: each scenario then records its own.
  var instruments: Set<Instrument>? {
    get { recording.instruments }
    set { recording.instruments = newValue }
  }
  var output: String { recording.output }
  var format: OutputFormat { recording.format }

  @Option(help: "starter (the tutorial's starting point, default) or fixed.")
  var variant: String?

  @Option(help: "How many times the scenario repeats its core step (a positive integer).")
  var iterations: Int?

  @Flag(
    name: .customLong("memory-warning"),
    help: "Simulate a memory warning when the scenario ends, then mark a generation.")
  var memoryWarning = false

  @Option(help: ArgumentHelp("Kill a scenario that runs longer than this many seconds (exit 3).", valueName: "seconds"))
  var timeout: Int = 600

  @Flag(
    name: .customLong("in-process"),
    help: "Run scenarios in this process instead of a child process (no crash isolation).")
  var inProcess = false

  @Option(name: .customLong("child-result"), help: .hidden)
  var childResult: String?

  /// The parent's RecordingConfiguration, as JSON: a child records with exactly it.
  @Option(name: .customLong("child-configuration"), help: .hidden)
  var childConfiguration: String?

  func validate(for scenarios: [Scenario]) throws {
    if let variant {
      for scenario in scenarios where !scenario.variants.map(\.rawValue).contains(variant) {
        let accepted = scenario.variants.map(\.rawValue)
        throw ValidationError(
          "unknown variant '\(variant)' for \(scenario.name); \(Suggestion.didYouMean(variant, among: accepted))"
            + "accepted: \(accepted.joined(separator: ", "))")
      }
    }
    if let iterations, iterations < 1 {
      throw ValidationError("--iterations must be a positive integer, got \(iterations)")
    }
    guard (1...86_400).contains(timeout) else {
      throw ValidationError("--timeout must be between 1 and 86400 seconds, got \(timeout)")
    }
    // Without --instruments each scenario records what it declares.
    try recording.validate(
      lackingLeaks: instruments == nil ? scenarios.filter { !$0.instruments.contains(.leaks) }.map(\.name) : [])
  }

  /// What the options ask to record. In a scenario's child process, the parent's
  /// configuration as it handed it over.
  func configuration() throws -> RecordingConfiguration {
    guard let childConfiguration else { return recordingConfiguration }
    do {
      return try JSONDecoder().decode(
        RecordingConfiguration.self,
        from: BoundedFile.read(childConfiguration, limit: BoundedFile.handOverLimit))
    } catch {
      throw ValidationError("--child-configuration \(childConfiguration): \(error)")
    }
  }

  var recordingConfiguration: RecordingConfiguration { recording.configuration(memoryWarningAtEnd: memoryWarning) }
}
