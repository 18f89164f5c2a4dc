import Foundation
import PerfBenchSupport
import Testing

@testable import PerfHarness
@testable import PerfReports

/// A status is shown only where a check or a baseline tolerance judged a figure, and a pass
/// names what it did not gate. The HTML page's side is tested in a browser in
/// PerfHarnessCLITests/HTMLBrowserTests.
@Suite("Statuses and what was not gated")
struct StatusTests {
  /// The synthetic report (leaks, allocations, a profile) as a run judged by one passing limit.
  private func passedOneLimit() throws -> Report {
    var report = try HTMLReport.syntheticReport(samples: 200, stackDepth: 8, allocations: 2_000)
    report.checks = [
      CheckResult(name: Limit.maxPeakHeap.key, limit: 1e12, actual: 1_000_000, passed: true, detail: nil)
    ]
    report.checked = true
    return report
  }

  private func comparison(_ rows: [BaselineComparison.Row]) -> BaselineComparison {
    BaselineComparison(
      baseline: "base.json", baselineScenario: "sample [starter]", tolerancePercent: 10, timeTolerancePercent: nil,
      peakTolerancePercent: nil, minimumBytes: 4096, minimumCount: 64, passed: true, rows: rows)
  }

  /// Gated, with no limit (peak heap without --peak-tolerance), and with a limit but no
  /// baseline figure: only the first was judged.
  private let rows = [
    BaselineComparison.Row(
      metric: "persistent bytes", unit: "bytes", baseline: 1000, current: 1050, changePercent: 5, limitPercent: 10,
      passed: true, detail: nil),
    BaselineComparison.Row(
      metric: "peak heap", unit: "bytes", baseline: 1000, current: 2670, changePercent: 167, limitPercent: nil,
      passed: true, detail: nil),
    BaselineComparison.Row(
      metric: "total allocations", unit: "count", baseline: nil, current: 12, changePercent: nil, limitPercent: 10,
      passed: true, detail: "not measured in the baseline"),
  ]

  private func line(_ text: String, _ metric: String) throws -> String {
    try #require(text.split(separator: "\n").map(String.init).first { $0.contains(metric) }, "\(text)")
  }

  @Test("text and markdown mark only judged comparison rows ok, the others not gated")
  func comparisonRows() throws {
    let text = ComparisonText.render(comparison(rows))
    #expect(try line(text, "persistent bytes").hasPrefix("    ok   "))
    for metric in ["peak heap", "total allocations"] {
      let row = try line(text, metric)
      #expect(!row.contains("ok ") && row.contains("not gated"), "\(row)")
    }
    let markdown = MarkdownSummary.comparison(comparison(rows))
    #expect(try line(markdown, "persistent bytes").hasPrefix("| ✅ |"))
    for metric in ["peak heap", "total allocations"] {
      let row = try line(markdown, metric)
      #expect(!row.contains("✅") && row.hasSuffix("| not gated |"), "\(row)")
    }
  }

  @Test("a pass beside leaks and cycles no check gated names them: findings, text, markdown, JSON")
  func passNamesWhatItDidNotGate() throws {
    let report = try passedOneLimit()
    let checks = try #require(Findings.of(report).first { $0.kind == "checks" })
    #expect(checks.summary.hasPrefix("Every check passed (1 check)"))
    #expect(checks.summary.contains("not gated: leaked bytes, retain cycles"), "\(checks.summary)")
    #expect(!checks.summary.contains("peak heap"), "the peak heap was gated")
    #expect(checks.details.contains { $0.hasPrefix("not gated: leaked bytes, 206 leaked blocks") }, "\(checks.details)")

    let text = RunSummaryText.render(report, reportPath: nil)
    let notGated = try #require(text.range(of: "  Not gated (measured; no check or baseline tolerance judged it):"))
    #expect(text[notGated.upperBound...].contains("leaked bytes"))
    #expect(text[notGated.upperBound...].contains("1 retain cycle × 3  (gate with max-cycles)"))
    let markdown = MarkdownSummary.render(report, reportPath: nil)
    #expect(markdown.contains("**Not gated**") && markdown.contains("- retain cycles: 1 retain cycle × 3"))

    var judged = report
    judged.notGated = report.ungatedFigures()
    let json = try JSONSerialization.jsonObject(with: ReportJSON.encode(judged)) as? [String: Any]
    let figures = try #require(json?["notGated"] as? [[String: Any]])
    #expect(figures.compactMap { $0["figure"] as? String }.prefix(2) == ["leaked bytes", "retain cycles"])
    #expect(figures.allSatisfy { $0["measured"] is String && $0["gatedBy"] is String })
  }

  @Test("a report written before notGated still reads, and its figures are read from the report")
  func olderReportsRead() throws {
    var object = try #require(
      JSONSerialization.jsonObject(with: ReportJSON.encode(passedOneLimit())) as? [String: Any])
    #expect(object["notGated"] == nil)
    object["checked"] = nil
    let report = try ReportJSON.decode(JSONSerialization.data(withJSONObject: object))
    #expect(report.notGated == nil)
    #expect(report.notGatedFigures.map(\.figure).contains("leaked bytes"))
    let embedded = try HTMLReport.render(report)
    #expect(embedded.contains(#""notGated":[{"#), "the page gets the figures its findings name")
  }

  @Test("a limit or a baseline row that gates a figure takes it off the list; a run nothing judged lists nothing")
  func gatedFiguresAreNotListed() throws {
    var report = try passedOneLimit()
    report.checks.append(
      CheckResult(name: Limit.maxLeakedBytes.key, limit: 1e9, actual: 20_000, passed: true, detail: nil))
    #expect(!report.ungatedFigures().map(\.figure).contains("leaked bytes"))
    report.comparison = comparison([
      BaselineComparison.Row(
        metric: "retain cycles", unit: "count", baseline: 3, current: 3, changePercent: 0, limitPercent: 0,
        passed: true, detail: nil)
    ])
    #expect(!report.ungatedFigures().map(\.figure).contains("retain cycles"))
    report.checks = []
    report.comparison = nil
    report.checked = false
    #expect(report.notGatedFigures.isEmpty && report.verdict == "no checks")
  }

  @Test("a baseline none of whose rows was judged gates nothing: no pass, no checks, the finding says why")
  func baselineThatGatedNothing() throws {
    var report = try passedOneLimit()
    report.checks = []
    report.comparison = comparison(Array(rows.dropFirst()))
    #expect(report.comparison?.judgedAnything == false)
    report.checked = nil
    #expect(report.verdict == "no checks")
    let checks = try #require(Findings.of(report).first { $0.kind == "checks" })
    #expect(checks.summary.hasPrefix("The baseline gated nothing"), "\(checks.summary)")
    report.comparison = comparison(rows)
    #expect(report.comparison?.judgedAnything == true && report.verdict == "passed")
  }

  @Test("index.html leads with the findings each report page leads with, the CPU finding included")
  func indexLeadsWithFindings() throws {
    var report = try HTMLReport.syntheticReport(samples: 200, stackDepth: 8, allocations: 2_000)
    report.leaks = nil
    report.timeProfile?.threads = [
      try JSONDecoder().decode(
        TimeProfileReport.ThreadSummary.self,
        from: Data(
          #"""
          {"name":"main","threadID":1,"isMain":true,"sampleCount":100,"weightMilliseconds":100,"percent":90,
           "topFunctions":[{"symbol":"App.applyFilter(_:)","module":"App","isApp":true,"selfWeight":60,
           "totalWeight":80,"selfPercent":60,"totalPercent":80,"sampleCount":60}]}
          """#.utf8))
    ]
    let findings = Findings.of(report)
    #expect(findings.allSatisfy { !$0.isProblem })
    let index = RunIndexHTML.render([(report, "synthetic/large")])
    #expect(index.contains("Heaviest program function: App.applyFilter(_:) on main (main)"))
    #expect(!index.contains("nothing to act on"))
    var position = index.startIndex
    for finding in findings {
      let found = try #require(
        index.range(of: RunIndexHTML.escape(finding.summary), range: position..<index.endIndex),
        "\(finding.summary) missing or out of order")
      position = found.upperBound
    }
  }
}
