import Foundation
import PerfHarness
import PerfReports
import Testing

/// The tutorial's Allocations findings, measured on the scenarios through the built binary.
@Suite("Allocations on the scenarios")
struct AllocationsScenarioTests {
  let perfharness = try! BuiltBinary("perfharness")

  private func allocations(_ scenario: String, variant: String, iterations: Int) throws -> AllocationsReport {
    try #require(try report(scenario, variant: variant, iterations: iterations).allocations)
  }

  private func report(_ scenario: String, variant: String, iterations: Int) throws -> Report {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "scenario", scenario, "--variant", variant, "--iterations", String(iterations),
      "--instruments", "allocations", "--format", "json", "--output", directory.path,
    ])
    #expect(result.status == 0, "\(result.standardError)")
    return try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
  }

  @Test("the findings call the starter's growth a problem, naming what grew, and the fixed variant's library noise not")
  func growthFindings() throws {
    let starter = try #require(
      Findings.of(try report("search-drill-downs", variant: "starter", iterations: 2)).first {
        $0.kind == "allocations"
      })
    #expect(starter.isProblem)
    #expect(starter.details.contains { $0.hasPrefix("PhotoSearch.Image: +") }, "\(starter.details)")
    let fixed = try #require(
      Findings.of(try report("search-drill-downs", variant: "fixed", iterations: 2)).first { $0.kind == "allocations" })
    #expect(!fixed.isProblem, "\(fixed.summary) \(fixed.details)")
  }

  @Test("search-drill-downs, starter: every drill-down grows by its thumbnails, through the cache's set")
  func drillDownsStarter() throws {
    let allocations = try allocations("search-drill-downs", variant: "starter", iterations: 3)
    let drillDowns = allocations.generations.filter { $0.label.hasPrefix("Drill-down") }
    #expect(drillDowns.count == 3)
    for generation in drillDowns {
      #expect(generation.growthBytes > 500_000, "\(generation.label) grew \(generation.growthBytes) bytes")
      let heaviest = try #require(generation.categories.first)
      #expect(
        heaviest.allocationStack.contains { $0.symbol.contains("ImageCache.set(_:forKey:)") },
        "\(heaviest.name): \(heaviest.allocationStack.map(\.symbol))")
    }
    // The memory warning does not bring the heap back.
    let warning = try #require(allocations.generations.first { $0.label == "Memory warning" })
    let lastDrillDown = try #require(drillDowns.last)
    #expect(Double(warning.liveBytes) > Double(lastDrillDown.liveBytes) * 0.9)
  }

  @Test("search-drill-downs, fixed: after the memory warning every generation grew under 64 KB")
  func drillDownsFixed() throws {
    let allocations = try allocations("search-drill-downs", variant: "fixed", iterations: 3)
    let afterSearches = allocations.generations.drop { $0.label != "Drill-down 1" }
    #expect(afterSearches.count >= 4)
    for generation in afterSearches {
      #expect(generation.growthBytes < 64 * 1024, "\(generation.label) grew \(generation.growthBytes) bytes")
    }
  }

  @Test(
    "closure-retain-cycles: # Persistent / # Transient of the results screen and its cells",
    arguments: [("starter", 3, 0), ("fixed", 0, 3)])
  func retainCycles(variant: String, persistent: Int, transient: Int) throws {
    let allocations = try allocations("closure-retain-cycles", variant: variant, iterations: 3)
    let controller = try #require(allocations.category(named: "PhotoSearch.SearchResultsViewController"))
    #expect(controller.persistentCount == persistent)
    #expect(controller.transientCount == transient)
    let cells = try #require(allocations.category(named: "PhotoSearch.SearchResultsCollectionViewCell"))
    if persistent > 0 {
      #expect(cells.persistentCount > 0 && cells.transientCount == 0)
    } else {
      #expect(cells.persistentCount == 0 && cells.transientCount > 0)
    }
    #expect(allocations.categories(matching: "searchresults").count >= 2)
  }
}
