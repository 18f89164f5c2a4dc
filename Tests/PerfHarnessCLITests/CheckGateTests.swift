import Foundation
import PerfHarness
import Testing

/// `--check` on the scenarios' own thresholds files: the starter variants fail the gate
/// for the tutorial's reasons, the fixed ones pass.
@Suite("CI gate on the scenarios")
struct CheckGateTests {
  let perfharness = try! BuiltBinary("perfharness")

  /// The package root, where Scenarios/thresholds lives.
  var packageRoot: URL {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
  }

  private func gate(_ scenario: String, variant: String) throws -> (Int32, Report) {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run(
      [
        "scenario", scenario, "--variant", variant, "--iterations", "2", "--check",
        "--format", "json", "--output", directory.path,
      ], in: packageRoot)
    let report = try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
    return (result.status, report)
  }

  @Test("starter fails with the leaked results screens and the growing cache")
  func starterFails() throws {
    let (status, report) = try gate("search-drill-downs", variant: "starter")
    #expect(status == 2)
    #expect(report.status == .failed)
    let failed = report.checks.filter { !$0.passed }
    #expect(failed.contains { $0.name == "max-persistent PhotoSearch.SearchResultsViewController" && $0.actual == 2 })
    let growth = failed.filter { $0.name == "max-growth-per-generation" }
    #expect(growth.count == 2, "both drill-downs grow")
    #expect(growth.allSatisfy { ($0.detail ?? "").contains("Drill-down") })
  }

  @Test("closure-retain-cycles starter fails on persistent screens, cells and closure contexts")
  func cyclesStarterFails() throws {
    let (status, report) = try gate("closure-retain-cycles", variant: "starter")
    #expect(status == 2)
    let failed = Set(report.checks.filter { !$0.passed }.map(\.name))
    let expected: Set = [
      "max-persistent PhotoSearch.SearchResultsViewController",
      "max-persistent PhotoSearch.SearchResultsCollectionViewCell", "max-persistent closure context",
      "max-leaked-bytes", "max-cycles",
    ]
    #expect(failed == expected)
    // The thresholds limit leaks, so --check recorded them along with the defaults.
    #expect(report.scenario.instruments == [.time, .allocations, .leaks])
    let cycles = try #require(report.checks.first { $0.name == "max-cycles" })
    #expect((cycles.detail ?? "").contains("PhotoSearch.SearchResultsViewController"), "\(cycles)")
  }

  @Test("fixed passes", arguments: ["filtered-thumbnail-scrolling", "search-drill-downs", "closure-retain-cycles"])
  func fixedPasses(scenario: String) throws {
    let (status, report) = try gate(scenario, variant: "fixed")
    #expect(status == 0, "\(report.checks.filter { !$0.passed })")
    #expect(!report.checks.isEmpty && report.checks.allSatisfy(\.passed))
  }

  @Test("--check with no thresholds file and no limit flags is refused before anything runs")
  func nothingToCheck() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "scenario", "closure-retain-cycles", "--check", "--thresholds", directory.path, "--output", directory.path,
    ])
    #expect(result.status == 64)
    #expect(result.standardError.contains("no thresholds for closure-retain-cycles"), "\(result.standardError)")
    #expect(result.standardError.contains("accepted: that file"))
    #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("closure-retain-cycles").path))
  }

  @Test("a limit nothing measured fails rather than passing silently")
  func unmeasured() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "scenario", "closure-retain-cycles", "--variant", "fixed", "--iterations", "1", "--instruments", "time",
      "--check", "--max-persistent", "PhotoSearch.Photo=1000", "--thresholds", directory.path, "--output",
      directory.path,
    ])
    #expect(result.status == 2)
    #expect(result.standardOutput.contains("not measured"))
  }
}
