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

/// `--format markdown`: what a pull request shows (`$GITHUB_STEP_SUMMARY` or a comment), with
/// the exit codes of the text and JSON formats.
@Suite("Markdown summaries for pull requests")
struct MarkdownSummaryTests {
  let perfharness = try! BuiltBinary("perfharness")

  @Test("a failing gate: the verdict, the findings, every check as a table row, exit 2 as ever")
  func failingGate() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run(
      [
        "scenario", "closure-retain-cycles", "--iterations", "2", "--check", "--format", "markdown", "--output",
        directory.path,
      ], in: CheckGateTests().packageRoot)
    #expect(result.status == 2)
    let text = result.standardOutput
    #expect(text.hasPrefix("### ❌ closure-retain-cycles [starter]: failed\n"), "\(text)")
    #expect(text.contains("**Findings**") && text.contains("retain cycle"))
    #expect(text.contains("| | check | limit | actual | detail |"))
    let report = try JSONDecoder().decode(
      Report.self,
      from: Data(contentsOf: directory.appendingPathComponent("closure-retain-cycles/starter/report.json")))
    // One row per check, each with its verdict; no line of a table is broken by a type's name.
    let rows = text.split(separator: "\n").filter { $0.hasPrefix("| ✅ |") || $0.hasPrefix("| ❌ |") }
    #expect(rows.count == report.checks.count)
    #expect(rows.filter { $0.hasPrefix("| ❌ |") }.count == report.checks.filter { !$0.passed }.count)
    #expect(rows.allSatisfy { $0.replacingOccurrences(of: "\\|", with: "").split(separator: "|").count == 5 })
    #expect(text.hasSuffix("All reports of this run: `\(directory.path)/index.html`\n"))
    // The findings lead with the failed checks, by name, in the stored run's text as well.
    let failedNames = report.checks.filter { !$0.passed }.map(\.name)
    #expect(!failedNames.isEmpty)
    let summary = try perfharness.run([
      "report", directory.appendingPathComponent("closure-retain-cycles/starter/report.json").path,
    ])
    #expect(summary.status == 0, "\(summary.standardError)")
    #expect(summary.standardOutput.contains("\(failedNames.count) of \(report.checks.count) checks failed"))
    for name in failedNames { #expect(summary.standardOutput.contains(name), "\(name)") }
  }

  @Test("compare: the figures as a table, exit 0 for a report against itself")
  func compare() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let run = try perfharness.run([
      "scenario", "search-drill-downs", "--variant", "fixed", "--iterations", "2", "--instruments", "allocations",
      "--output", directory.path,
    ])
    #expect(run.status == 0, "\(run.standardError)")
    let file = directory.appendingPathComponent("search-drill-downs/fixed/report.json").path
    let result = try perfharness.run(["compare", file, file, "--format", "markdown"])
    #expect(result.status == 0, "\(result.standardError)")
    #expect(result.standardOutput.hasPrefix("### search-drill-downs [fixed] against its baseline"))
    #expect(result.standardOutput.contains("no regression"))
    #expect(result.standardOutput.contains("| | figure | baseline | current | change | limit |"))
    #expect(result.standardOutput.contains("| ✅ | persistent bytes |"), "\(result.standardOutput)")
  }

  /// One limit on the peak heap passed a run that leaked, and nothing said the leaks had not
  /// been judged.
  @Test("a pass beside leaks and a cycle no limit gated names them: text, markdown, JSON and the page")
  func passNamesWhatItDidNotGate() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let arguments = [
      "scenario", "closure-retain-cycles", "--iterations", "1", "--instruments", "allocations,leaks", "--check",
      "--max-peak-heap", "1GiB", "--thresholds", directory.path,
    ]
    let text = try perfharness.run(arguments + ["--output", directory.appendingPathComponent("text").path])
    #expect(text.status == 0, "\(text.standardError)")
    let folder = directory.appendingPathComponent("text/closure-retain-cycles/starter")
    let report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: folder.appendingPathComponent("report.json")))
    #expect(report.status == .passed && (report.leaks?.leakedCount ?? 0) > 0 && report.leaks?.cycles.isEmpty == false)
    let figures = try #require(report.notGated).map(\.figure)
    #expect(figures.starts(with: ["leaked bytes", "retain cycles"]) && !figures.contains("peak heap"), "\(figures)")
    try ReportSchema.validateReports(under: directory)
    #expect(text.standardOutput.contains("checks); not gated: leaked bytes, retain cycles"))
    #expect(text.standardOutput.contains("  Not gated (measured; no check or baseline tolerance judged it):"))
    let markdown = try perfharness.run(
      arguments + ["--format", "markdown", "--output", directory.appendingPathComponent("markdown").path])
    #expect(markdown.standardOutput.contains("**Not gated**"), "\(markdown.standardOutput)")
    #expect(markdown.standardOutput.contains("- leaked bytes: \(report.leaks?.leakedCount ?? 0) leaked blocks"))
    let page = try Chromium.selfTest(folder.appendingPathComponent("report.html"), workingIn: directory)
    #expect(page.problems.isEmpty, "\(page.problems)")
    #expect(page.dom.contains(#"<span class="badge not-gated">not gated</span> leaked bytes: "#))
  }
}
