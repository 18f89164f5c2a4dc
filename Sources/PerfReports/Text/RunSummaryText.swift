import Foundation
import PerfHarness

/// The per-scenario summary printed after a run.
public enum RunSummaryText {
  /// - Parameters:
  ///   - reportPath: where the JSON report was written, if it was.
  ///   - pagePath: where its HTML page was written: the file a person opens.
  public static func render(_ report: Report, reportPath: String?, pagePath: String? = nil) -> String {
    var lines: [String] = []
    let scenario = report.scenario
    let plural = scenario.iterations == 1 ? "iteration" : "iterations"
    lines.append(
      "\(scenario.name) [\(scenario.variant), \(scenario.iterations) \(plural)]: \(report.verdict) in \(formatMilliseconds(report.wallTimeMilliseconds))"
    )
    if let error = report.error {
      lines.append("  error: \(error)")
    }
    if let program = report.program {
      lines.append(
        "  program: " + ([program.executable] + program.arguments).map(TerminalText.inline).joined(separator: " ")
          + ", " + program.ending)
      for child in program.children ?? [] {
        lines.append(
          "  child process \(child.pid) \(TerminalText.inline(child.executable)): \(TerminalText.inline(child.report))")
      }
    }
    lines.append(FindingsText.render(Findings.of(report)).trimmingCharacters(in: .newlines))
    if !report.steps.isEmpty {
      let width = max(4, report.steps.map { TerminalText.inline($0.name).count }.max() ?? 0)
      lines.append("  " + pad("step", width) + "  count      total     median        max")
      for step in report.steps {
        lines.append(
          "  " + pad(TerminalText.inline(step.name), width) + "  " + leftPad(String(step.count), 5)
            + leftPad(formatMilliseconds(step.totalMilliseconds), 11)
            + leftPad(formatMilliseconds(step.medianMilliseconds), 11)
            + leftPad(formatMilliseconds(step.maxMilliseconds), 11))
      }
    }
    if !report.marks.isEmpty {
      lines.append(
        "  generations: " + report.marks.map { "\($0.index) \(TerminalText.inline($0.label))" }.joined(separator: " · ")
      )
    }
    if let timeProfile = report.timeProfile {
      lines.append(TimeProfileText.render(timeProfile).trimmingCharacters(in: .newlines))
    }
    if let allocations = report.allocations {
      lines.append(AllocationsText.render(allocations).trimmingCharacters(in: .newlines))
    }
    if let leaks = report.leaks {
      lines.append(
        leaks.textSummary().split(separator: "\n", omittingEmptySubsequences: false)
          .map { "  " + $0 }.joined(separator: "\n").trimmingCharacters(in: .newlines))
    }
    if !report.checks.isEmpty {
      lines.append(ChecksText.render(report.checks).trimmingCharacters(in: .newlines))
    }
    if let comparison = report.comparison {
      lines.append(ComparisonText.render(comparison).trimmingCharacters(in: .newlines))
    }
    let notGated = report.notGatedFigures
    if !notGated.isEmpty {
      lines.append(NotGatedText.render(notGated).trimmingCharacters(in: .newlines))
    }
    if let reportPath {
      lines.append("  report: \(reportPath)")
    }
    if let pagePath {
      lines.append("  html:   \(pagePath)")
    }
    return lines.joined(separator: "\n") + "\n"
  }
}

/// `12.3 ms` below a second, `1.23 s` above.
public func formatMilliseconds(_ milliseconds: Double) -> String {
  milliseconds < 1000
    ? String(format: "%.1f ms", milliseconds) : String(format: "%.2f s", milliseconds / 1000)
}

func pad(_ text: String, _ width: Int) -> String {
  text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
}

func leftPad(_ text: String, _ width: Int) -> String {
  text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
}

/// The checks of a `--check` run: every limit, and for a failure what and where.
public enum ChecksText {
  public static func render(_ checks: [CheckResult]) -> String {
    guard !checks.isEmpty else { return "" }
    let failed = checks.filter { !$0.passed }.count
    var lines = ["  Checks: \(checks.count - failed) passed, \(failed) failed"]
    let width = min(48, checks.map(\.name.count).max() ?? 10)
    for check in checks {
      let limit = format(check.limit, name: check.name)
      let actual = check.actual.map { format($0, name: check.name) } ?? "not measured"
      lines.append(
        "    " + (check.passed ? "pass " : "FAIL ") + pad(check.name, width) + "  limit " + leftPad(limit, 10)
          + "  actual " + leftPad(actual, 12) + (check.detail.map { "  \($0)" } ?? ""))
    }
    return lines.joined(separator: "\n") + "\n"
  }

  private static func format(_ value: Double, name: String) -> String {
    let isSize = name.contains("growth") || name.contains("bytes") || name.contains("heap")
    return isSize ? formatBytes(Int(value)) : String(Int(value))
  }
}

/// What a checked run measured that nothing gated: its pass does not vouch for these.
public enum NotGatedText {
  public static func render(_ figures: [UngatedFigure]) -> String {
    guard !figures.isEmpty else { return "" }
    let width = min(40, figures.map(\.figure.count).max() ?? 10)
    return
      (["  Not gated (measured; no check or baseline tolerance judged it):"]
      + figures.map { "    " + pad($0.figure, width) + "  \($0.measured)  (gate with \($0.gatedBy))" })
      .joined(separator: "\n") + "\n"
  }
}

/// The findings block the summary opens with: `!` marks what to act on.
public enum FindingsText {
  public static func render(_ findings: [Finding]) -> String {
    var lines = ["  Findings:"]
    for finding in findings {
      lines.append("    " + (finding.isProblem ? "! " : "· ") + finding.summary)
      lines += finding.details.map { "        " + $0 }
    }
    return lines.joined(separator: "\n") + "\n"
  }
}
