import Synchronization

/// The scenarios an executable offers on its command line.
public struct ScenarioCatalog: Sendable {
  public let scenarios: [Scenario]

  /// - Precondition: names are unique.
  public init(_ scenarios: [Scenario]) {
    var seen = Set<String>()
    for scenario in scenarios {
      precondition(seen.insert(scenario.name).inserted, "two scenarios are named \(scenario.name)")
    }
    self.scenarios = scenarios
  }

  public var names: [String] { scenarios.map(\.name) }

  public func scenario(named name: String) -> Scenario? {
    scenarios.first { $0.name == name }
  }
}
