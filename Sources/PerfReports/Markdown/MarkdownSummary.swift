import Foundation
import PerfHarness

/// GitHub-flavoured markdown for a pull request: a run's findings, its checks and its
/// comparison with a baseline, for `$GITHUB_STEP_SUMMARY` or a comment. Built from the same
/// findings, checks and rows as the text summary; nothing here knows a scenario.
public enum MarkdownSummary {
  /// One section per scenario run.
  /// - Parameters:
  ///   - reportPath: where the JSON report was written, if it was.
  ///   - pagePath: where its HTML page was written.
  public static func render(_ report: Report, reportPath: String?, pagePath: String? = nil) -> String {
    let scenario = report.scenario
    let mark = report.status == .passed ? (report.wasChecked ? "✅" : "ℹ️") : "❌"
    var out =
      "### \(mark) \(escape(scenario.name)) [\(escape(scenario.variant))]: \(report.verdict)\n\n"
      + "\(Findings.counted(scenario.iterations, "iteration")), \(formatMilliseconds(report.wallTimeMilliseconds)); "
      + "instruments: \(scenario.instruments.map(\.rawValue).joined(separator: ", "))\n\n"
    if let error = report.error { out += "> **Error:** \(escape(error))\n\n" }
    let findings = Findings.of(report)
    if !findings.isEmpty {
      out += "**Findings**\n\n"
      for finding in findings {
        out += "- " + (finding.isProblem ? "⚠️ " : "") + escape(finding.summary) + "\n"
        for detail in finding.details { out += "  - `\(code(detail))`\n" }
      }
      out += "\n"
    }
    if !report.checks.isEmpty {
      out += checks(report.checks)
    }
    if let comparison = report.comparison {
      out += self.comparison(comparison)
    }
    out += notGated(report.notGatedFigures)
    let paths = [reportPath, pagePath].compactMap { $0 }.map { "`\(code($0))`" }
    if !paths.isEmpty { out += "Report: \(paths.joined(separator: ", "))\n\n" }
    return out
  }

  /// The checks as a table: limit, actual, and for a failure what and where.
  public static func checks(_ checks: [CheckResult]) -> String {
    let failed = checks.filter { !$0.passed }.count
    var out = "**Checks**: \(checks.count - failed) passed, \(failed) failed\n\n"
    out += "| | check | limit | actual | detail |\n|---|---|---:|---:|---|\n"
    for check in checks {
      out +=
        "| \(check.passed ? "✅" : "❌") | \(escape(check.name)) | \(value(check.limit, name: check.name)) | "
        + "\(check.actual.map { value($0, name: check.name) } ?? "not measured") | \(escape(check.detail ?? "")) |\n"
    }
    return out + "\n"
  }

  /// What the run measured that nothing gated: what its pass does not vouch for.
  public static func notGated(_ figures: [UngatedFigure]) -> String {
    guard !figures.isEmpty else { return "" }
    return "**Not gated** (measured; no check or baseline tolerance judged it)\n\n"
      + figures.map { "- \(escape($0.figure)): \(escape($0.measured)); gate with `\(code($0.gatedBy))`\n" }.joined()
      + "\n"
  }

  /// A run against its baseline, figure by figure (what `compare` prints).
  public static func comparison(_ comparison: BaselineComparison) -> String {
    let failed = comparison.rows.filter { !$0.passed }.count
    var out =
      "**Baseline** \(escape(comparison.baselineScenario)) (`\(code(comparison.baseline))`): "
      + (comparison.passed ? "no regression" : "\(failed) regressed") + "\n\n"
    guard !comparison.rows.isEmpty else { return out }
    out += "| | figure | baseline | current | change | limit |\n|---|---|---:|---:|---:|---:|\n"
    for row in comparison.rows {
      let status = !row.passed ? "❌" : (row.isGated ? "✅" : "")
      out +=
        "| \(status) | \(escape(row.metric))\(row.detail.map { " (\(escape($0)))" } ?? "") | "
        + "\(figure(row.baseline, unit: row.unit)) | \(figure(row.current, unit: row.unit)) | "
        + "\(row.changePercent.map { String(format: "%+.1f %%", $0) } ?? "-") | "
        + "\(row.isGated ? row.limitPercent.map { String(format: "+%g %%", $0) } ?? "-" : "not gated") |\n"
    }
    out += "\n"
    if let functions = comparison.functionChanges, !functions.isEmpty {
      out += "**Functions that moved most** (share of the samples executing in them)\n\n"
      out += "| change | baseline | current | function |\n|---:|---:|---:|---|\n"
      for change in functions {
        out +=
          "| \(String(format: "%+.1f pts", change.changePoints)) | \(String(format: "%.1f %%", change.baselineSelfPercent)) | "
          + "\(String(format: "%.1f %%", change.currentSelfPercent)) | \(escape(change.symbol)) |\n"
      }
      out += "\n"
    }
    if let allocations = comparison.allocationChanges, !allocations.isEmpty {
      out += "**Allocation stacks that grew most** (live at the end)\n\n"
      out += "| growth | blocks | where | what |\n|---:|---:|---|---|\n"
      for change in allocations {
        out +=
          "| +\(formatBytes(change.currentBytes - change.baselineBytes)) | \(String(format: "%+d", change.currentCount - change.baselineCount)) | "
          + "\(escape(change.site)) | \(escape(change.category)) |\n"
      }
      out += "\n"
    }
    return out
  }

  /// Text safe in a table cell and in running text: pipes and markup characters escaped,
  /// line breaks folded.
  static func escape(_ text: String) -> String {
    var out = ""
    for character in text {
      switch character {
      case "|", "*", "_", "`", "<", ">", "[", "]", "\\", "#": out += "\\\(character)"
      case "\n", "\r": out += " "
      default: out.append(character)
      }
    }
    return out
  }

  /// Text inside a code span: backticks cannot be escaped there, so they become quotes.
  static func code(_ text: String) -> String {
    text.replacingOccurrences(of: "`", with: "'").replacingOccurrences(of: "\n", with: " ")
  }

  private static func value(_ value: Double, name: String) -> String {
    let isSize = name.contains("growth") || name.contains("bytes") || name.contains("heap")
    return isSize ? formatBytes(Int(value)) : String(format: "%g", value)
  }

  private static func figure(_ value: Double?, unit: String) -> String {
    guard let value else { return "-" }
    switch unit {
    case "bytes": return formatBytes(Int(value))
    case "ms": return formatMilliseconds(value)
    default: return String(Int(value))
    }
  }
}
