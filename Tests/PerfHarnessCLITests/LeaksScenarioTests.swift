import Foundation
import PerfHarness
import Testing

/// The leaks instrument on the scenarios, through the built binary.
@Suite("Leaks instrument on the scenarios")
struct LeaksScenarioTests {
  let perfharness = try! BuiltBinary("perfharness")

  private func leaks(_ scenario: String, variant: String) throws -> (Report, URL) {
    let directory = try temporaryDirectory()
    let result = try perfharness.run([
      "scenario", scenario, "--variant", variant, "--iterations", "3", "--instruments", "allocations,leaks",
      "--format", "json", "--output", directory.path,
    ])
    #expect(result.status == 0, "\(result.standardError)")
    return (try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8)), directory)
  }

  @Test(
    "fixed: no results screen, cell or closure context is reported leaked",
    arguments: ["closure-retain-cycles", "search-drill-downs"])
  func fixedHasNoAppLeaks(scenario: String) throws {
    let (report, directory) = try leaks(scenario, variant: "fixed")
    defer { try? FileManager.default.removeItem(at: directory) }
    let leaks = try #require(report.leaks)
    #expect(leaks.blocksScanned > 0)
    let leakedTypes = Set(
      leaks.rootLeaks.map(\.type) + leaks.indirectLeaks.map(\.type) + leaks.cycles.flatMap { $0.nodes.map(\.type) })
    #expect(leakedTypes.filter { $0.hasPrefix("PhotoSearch.") }.isEmpty, "\(leakedTypes)")
    #expect(leaks.cycles.isEmpty)
  }

  @Test("starter: a cycle found is drawn as Graphviz next to the report")
  func starterCycleFiles() throws {
    let (report, directory) = try leaks("search-drill-downs", variant: "starter")
    defer { try? FileManager.default.removeItem(at: directory) }
    let leaks = try #require(report.leaks)
    for (index, cycle) in leaks.cycles.enumerated() {
      let dot = try String(
        contentsOf: directory.appendingPathComponent("search-drill-downs/starter/leak-cycle-\(index + 1).dot"),
        encoding: .utf8)
      #expect(dot.hasPrefix("digraph"))
      #expect(cycle.nodes.allSatisfy { dot.contains($0.type) })
    }
  }
}
