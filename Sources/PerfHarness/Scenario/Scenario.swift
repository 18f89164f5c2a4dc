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
  let body: Body

  /// - Parameters:
  ///   - name: lowercase letters, digits and `-`, as typed after `perfharness scenario`.
  ///   - variants: the variants it can run; the first is the default.
  ///   - defaultIterations: how many times the scenario repeats its core step by default.
  ///   - body: drives the code under test on the main thread.
  public init(
    _ name: String, summary: String, variants: [ScenarioVariant] = [.starter, .fixed],
    defaultIterations: Int = 5, body: @escaping Body
  ) {
    precondition(Scenario.isValidName(name), "scenario names use lowercase letters, digits and '-': \(name)")
    precondition(!variants.isEmpty, "a scenario needs at least one variant")
    precondition(defaultIterations > 0, "defaultIterations must be positive")
    self.name = name
    self.summary = summary
    self.variants = variants
    self.defaultIterations = defaultIterations
    self.body = body
  }

  static func isValidName(_ name: String) -> Bool {
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
