import Synchronization

/// The scenarios an executable offers on its command line.
public struct ScenarioCatalog: Sendable {
  public let scenarios: [Scenario]

  /// A catalog with declaration problems (``problems``) is refused by the command line.
  public init(_ scenarios: [Scenario]) {
    var seen = Set<String>()
    var problems = scenarios.flatMap(\.declarationProblems)
    for scenario in scenarios where !seen.insert(scenario.name).inserted {
      problems.append("two scenarios are named '\(scenario.name)'")
    }
    self.scenarios = scenarios
    self.problems = problems
  }

  /// What is wrong with the scenarios as declared: invalid names, duplicates.
  public let problems: [String]

  public var names: [String] { scenarios.map(\.name) }

  public func scenario(named name: String) -> Scenario? {
    scenarios.first { $0.name == name }
  }
}
