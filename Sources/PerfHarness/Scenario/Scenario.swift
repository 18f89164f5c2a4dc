import Foundation

/// A repeatable piece of app usage that the instruments record, like a recorded Instruments
/// session: search, scroll, drill in and back.
///
/// Declare scenarios in your own package and hand them to `PerfHarnessCLI.main(scenarios:)`
/// to get the `perfharness` command line for them.
public struct Scenario: Sendable {
  public typealias Body = @MainActor @Sendable (ScenarioContext) throws -> Void

  /// The name used on the command line: lowercase words joined by `-`.
  public let name: String
  public let summary: String
  /// The variants the scenario can run; the first is the default.
  public let variants: [ScenarioVariant]
  /// Iterations when `--iterations` is not given.
  public let defaultIterations: Int
  /// The instruments a run records when `--instruments` is not given: what the scenario
  /// needs to show what it was written to show (a scenario about a retain cycle needs
  /// `leaks`, which is not on by default). In `Instrument.allCases` order.
  public var instruments: [Instrument] {
    Instrument.allCases.enumerated().filter { instrumentBits & (1 << $0.offset) != 0 }.map(\.element)
  }
  private let instrumentBits: UInt8
  let body: Body

  /// - Parameters:
  ///   - name: lowercase letters, digits and `-`, as typed after `perfharness scenario`.
  ///   - summary: one line for `perfharness list`.
  ///   - variants: the variants it can run; the first is the default.
  ///   - defaultIterations: how many times the scenario repeats its core step by default.
  ///   - instruments: what a run records without `--instruments` (default: time and
  ///     allocations); an explicit `--instruments` replaces it.
  ///   - body: drives the code under test on the main thread.
  public init(
    _ name: String, summary: String, variants: [ScenarioVariant] = [.starter, .fixed],
    defaultIterations: Int = 5, instruments: Set<Instrument> = Set(Instrument.defaults), body: @escaping Body
  ) {
    // Not preconditions: a release build traps without their message. The command line
    // refuses the catalog with these instead (PerfHarnessCLI.main).
    var problems: [String] = []
    if !Scenario.isValidName(name) {
      problems.append("scenario name \(Scenario.quoted(name)) \(Scenario.nameRule)")
    }
    if variants.isEmpty { problems.append("scenario \(Scenario.quoted(name)) has no variant; it needs at least one") }
    for variant in variants where !Scenario.isValidName(variant.rawValue) {
      problems.append(
        "variant \(Scenario.quoted(variant.rawValue)) of scenario \(Scenario.quoted(name)) \(Scenario.nameRule)")
    }
    var seen = Set<String>()
    for variant in variants where !seen.insert(variant.rawValue).inserted {
      problems.append("scenario \(Scenario.quoted(name)) lists variant \(Scenario.quoted(variant.rawValue)) twice")
    }
    if defaultIterations <= 0 {
      problems.append("scenario \(Scenario.quoted(name)): defaultIterations must be positive, got \(defaultIterations)")
    }
    self.name = name
    self.summary = summary
    self.variants = variants.isEmpty ? [.starter] : variants
    self.defaultIterations = max(defaultIterations, 1)
    self.instrumentBits = Instrument.allCases.enumerated().reduce(0) {
      instruments.contains($1.element) ? $0 | (1 << $1.offset) : $0
    }
    self.body = body
    self.declarationProblems = problems
  }

  /// What is wrong with how the scenario was declared (empty when nothing is). Names end
  /// up as folder names of the report, so one that is not a plain name could write
  /// outside the output folder.
  public let declarationProblems: [String]

  static let nameRule = "is not valid: names use lowercase letters, digits and '-' (e.g. search-scroll)"

  /// Quoted with escapes: the name may hold control characters or be empty.
  static func quoted(_ name: String) -> String {
    "'"
      + name.unicodeScalars.map { $0.properties.generalCategory == .control ? $0.escaped(asASCII: true) : String($0) }
      .joined() + "'"
  }

  public typealias AsyncBody = @MainActor @Sendable (ScenarioContext) async throws -> Void

  /// A scenario whose body awaits (Swift concurrency). It runs as a task on the main actor
  /// while the main thread spins its run loop, so main-actor jobs, the main queue and the
  /// cooperative pool's threads run as in an app; the run ends when the task does.
  public init(
    _ name: String, summary: String, variants: [ScenarioVariant] = [.starter, .fixed],
    defaultIterations: Int = 5, instruments: Set<Instrument> = Set(Instrument.defaults), body: @escaping AsyncBody
  ) {
    self.init(
      name, summary: summary, variants: variants, defaultIterations: defaultIterations, instruments: instruments
    ) { context in
      try MainThreadTask.runToCompletion { try await body(context) }
    }
  }

  /// A scenario or variant name: lowercase letters, digits and `-`.
  public static func isValidName(_ name: String) -> Bool {
    !name.isEmpty && name.utf8.allSatisfy { (0x61...0x7a).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2d }
  }
}

/// Which version of the code under test a scenario runs.
public struct ScenarioVariant: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
  public let rawValue: String
  public init(rawValue: String) { self.rawValue = rawValue }

  /// The tutorial's starting point: the code with its performance and memory bugs.
  public static let starter = ScenarioVariant(rawValue: "starter")
  /// The code after the tutorial's fixes.
  public static let fixed = ScenarioVariant(rawValue: "fixed")

  public var description: String { rawValue }
}

/// Runs an async body from the synchronous main thread: a scenario's body is called there,
/// outside any task.
@MainActor
enum MainThreadTask {
  private final class Outcome: @unchecked Sendable {
    // Written and read on the main thread only: by the task (main actor) and the loop.
    var finished = false
    var error: (any Error)?
  }

  static func runToCompletion(_ body: @escaping @MainActor @Sendable () async throws -> Void) throws {
    let outcome = Outcome()
    Task { @MainActor in
      do { try await body() } catch { outcome.error = error }
      outcome.finished = true
    }
    // Main-actor jobs reach the main queue, which the main run loop drains.
    while !outcome.finished { _ = RunLoop.main.run(mode: .default, before: Date(timeIntervalSinceNow: 0.05)) }
    if let error = outcome.error { throw error }
  }
}
