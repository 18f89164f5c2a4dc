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

  /// Int.max as a limit trapped the text summary (SIGILL: 2^63 as a Double converted back to
  /// Int); 10^16 wrote a report that `report` and `--baseline` refused.
  @Test(
    "a limit or tolerance past what a report holds is a usage error naming the flag, the value and the range",
    arguments: [
      (["--check", "--max-persistent", "App.Screen=9223372036854775807"], "--max-persistent", "a count from 0 to"),
      (["--check", "--max-persistent", "App.Screen=10000000000000000"], "--max-persistent", "a count from 0 to"),
      (["--check", "--max-growth", "9223372036854775807B"], "--max-growth", "a size from 0 to"),
      (["--check", "--max-leaked-bytes", "1000001GB"], "--max-leaked-bytes", "a size from 0 to"),
      (["--check", "--max-peak-heap", "10000000000000000 B"], "--max-peak-heap", "a size from 0 to"),
      (["--baseline", "unused.json", "--min-increase", "1000001GB"], "--min-increase", "a size from 0 to"),
      (["--baseline", "unused.json", "--tolerance", "1e16"], "--tolerance", "a number from 0 to 1000000000000000"),
      (["--baseline", "unused.json", "--peak-tolerance", "1e300"], "--peak-tolerance", "a number from 0 to"),
    ])
  func limitsPastTheReportsRange(flags: [String], flag: String, range: String) throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let fixtures = try BuiltBinary("perfharness-fixtures")
    let result = try fixtures.run(
      ["scenario", "completes", "--thresholds", directory.path, "--output", directory.path] + flags)
    #expect(result.status == 64, "\(result.standardError)")
    let value = try #require(flags.last)
    for part in [flag, range, "too large"] {
      #expect(result.standardError.contains(part), "\(part): \(result.standardError)")
    }
    // A percentage is named as the number it was read as (1e16 as 1e+16).
    let named = ["'\(value)'", Double(value).map { "'\($0)'" }].compactMap { $0 }
    #expect(named.contains { result.standardError.contains($0) }, "\(result.standardError)")
  }

  @Test("the largest limits a report holds are checked, and the report is read back and taken as a baseline")
  func largestLimits() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let fixtures = try BuiltBinary("perfharness-fixtures")
    let largest = "\(Limit.largestValue)"
    let run = [
      "scenario", "completes", "--check", "--thresholds", directory.path, "--max-leaked-bytes", largest + " B",
      "--max-peak-heap", "1000000 GB", "--max-persistent", "perfharness_fixtures.Unused=" + largest,
      "--min-increase", largest + "B", "--tolerance", largest,
    ]
    let first = try fixtures.run(run + ["--output", directory.appendingPathComponent("base").path])
    // The made-up type matches nothing the run allocated: that check fails, by name.
    #expect(first.status == 2, "\(first.standardError)")
    #expect(first.standardOutput.contains("limit 1000000000000000"), "\(first.standardOutput)")
    let file = directory.appendingPathComponent("base/completes/starter/report.json").path
    let read = try BuiltBinary("perfharness").run(["report", file])
    #expect(read.status == 0, "\(read.standardError)")
    let again = try fixtures.run(
      run + ["--baseline", file, "--output", directory.appendingPathComponent("again").path])
    #expect(again.status == 2, "\(again.standardError)")
    #expect(again.standardOutput.contains("Baseline completes [starter]"), "\(again.standardOutput)")
    let stored = directory.appendingPathComponent("again/completes/starter/report.json").path
    #expect(try BuiltBinary("perfharness").run(["report", stored]).status == 0)
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
    #expect(text.standardOutput.contains("); not gated: leaked bytes, retain cycles"))
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
