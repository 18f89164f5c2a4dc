import Foundation
import PerfHarness

/// A run against its baseline, figure by figure: what `compare` and `--baseline` print.
public enum ComparisonText {
  public static func render(_ comparison: BaselineComparison) -> String {
    let failed = comparison.rows.filter { !$0.passed }.count
    let timeGate = comparison.timeTolerancePercent.map { "times +\(percent($0))" } ?? "times not gated"
    let peakGate = comparison.peakTolerancePercent.map { "peak heap +\(percent($0))" } ?? "peak heap not gated"
    var lines = [
      "  Baseline \(comparison.baselineScenario) (\(comparison.baseline)): "
        + (comparison.passed ? "no regression" : "\(failed) regressed")
        + " [tolerance +\(percent(comparison.tolerancePercent)), bytes beyond \(formatBytes(comparison.minimumBytes)), counts beyond \(comparison.minimumCount), \(timeGate), \(peakGate)]"
    ]
    guard !comparison.rows.isEmpty else { return lines.joined(separator: "\n") + "\n" }
    let width = min(56, comparison.rows.map(\.metric.count).max() ?? 10)
    lines.append(
      "    " + pad("", 5) + pad("metric", width) + leftPad("baseline", 12) + leftPad("current", 12)
        + leftPad("change", 10) + leftPad("limit", 11))
    for row in comparison.rows {
      let status = !row.passed ? "FAIL " : (row.isGated ? "ok   " : "     ")
      lines.append(
        "    " + status + pad(row.metric, width) + leftPad(value(row.baseline, unit: row.unit), 12)
          + leftPad(value(row.current, unit: row.unit), 12)
          + leftPad(row.changePercent.map { String(format: "%+.1f %%", $0) } ?? "-", 10)
          + leftPad(row.isGated ? row.limitPercent.map { "+" + percent($0) } ?? "-" : "not gated", 11)
          + (row.detail.map { "  \($0)" } ?? ""))
    }
    if let functions = comparison.functionChanges, !functions.isEmpty {
      lines.append("    Functions that moved most (share of the samples executing in them, Hide System Libraries):")
      for change in functions {
        lines.append(
          "      " + leftPad(String(format: "%+.1f pts", change.changePoints), 10) + "  "
            + leftPad(String(format: "%.1f %%", change.baselineSelfPercent), 7) + " -> "
            + leftPad(String(format: "%.1f %%", change.currentSelfPercent), 7) + "  \(change.symbol) [\(change.module)]"
        )
      }
    }
    if let allocations = comparison.allocationChanges, !allocations.isEmpty {
      lines.append("    Allocation stacks that grew most (live at the end):")
      for change in allocations {
        lines.append(
          "      " + leftPad("+" + formatBytes(change.currentBytes - change.baselineBytes), 11)
            + leftPad(signedBlocks(change.currentCount - change.baselineCount), 13)
            + "  \(change.site)  [\(change.category)]")
      }
    }
    return lines.joined(separator: "\n") + "\n"
  }

  /// `+1 block`, `-3 blocks`.
  private static func signedBlocks(_ change: Int) -> String {
    (change < 0 ? "-" : "+") + Findings.counted(abs(change), "block")
  }

  private static func value(_ value: Double?, unit: String) -> String {
    guard let value else { return "-" }
    switch unit {
    case "bytes": return formatBytes(Int(value))
    case "ms": return formatMilliseconds(value)
    default: return String(Int(value))
    }
  }

  private static func percent(_ value: Double) -> String {
    value == value.rounded() ? "\(Int(value)) %" : String(format: "%.1f %%", value)
  }
}
