import Foundation
import PerfHarness

/// The Allocations instrument's part of the run summary: categories by persistent bytes
/// (# Persistent / # Transient) and the generations' growth.
public enum AllocationsText {
  /// - Parameters:
  ///   - filter: show only categories whose name contains this (case-insensitive), like
  ///     the tutorial's filter field.
  /// Every loss the recorder counted: the figures above it are incomplete.
  static func lossText(_ lost: AllocationsReport.Lost) -> String {
    let parts = [
      (lost.blocks, "block", "not tracked"), (lost.freedCategories, "free", "with the type lost"),
      (lost.stacks, "allocation", "without a stack"), (lost.timelinePoints, "timeline point", ""),
      (lost.marks ?? 0, "mark", "past the 65535-generation limit (their allocations count in the last generation)"),
    ].filter { $0.0 > 0 }.map { Findings.counted($0.0, $0.1) + ($0.2.isEmpty ? "" : " " + $0.2) }
    return parts.isEmpty ? "" : "; LOST: " + parts.joined(separator: ", ")
  }

  public static func render(_ allocations: AllocationsReport, categoryLimit: Int = 10, filter: String? = nil) -> String
  {
    let totals = allocations.totals
    var lines: [String] = []
    lines.append(
      "  Allocations: \(Findings.counted(totals.totalAllocations, "allocation")) (\(formatBytes(totals.totalBytes))); "
        + "\(totals.persistentCount) persistent (\(formatBytes(totals.persistentBytes))), "
        + "\(totals.transientCount) transient; peak \(formatBytes(totals.peakLiveBytes))"
        + lossText(allocations.lost))
    var categories = allocations.categories
    if let filter, !filter.isEmpty {
      categories = categories.filter { $0.name.localizedCaseInsensitiveContains(filter) }
      lines.append("  Categories matching '\(filter)':")
    }
    let shown = categories.prefix(categoryLimit)
    // The name comes last and whole: a closure context's captured types, at the end of a
    // long name, are what tells one closure from another.
    lines.append(
      "    " + leftPad("# Persistent", 12) + leftPad("# Transient", 13) + leftPad("Persistent", 12)
        + leftPad("Total", 12) + "  Category")
    for category in shown {
      lines.append(
        "    " + leftPad(String(category.persistentCount), 12) + leftPad(String(category.transientCount), 13)
          + leftPad(formatBytes(category.persistentBytes), 12) + leftPad(formatBytes(category.totalBytes), 12) + "  "
          + category.name)
    }
    if categories.count > shown.count {
      let more = categories.count - shown.count
      lines.append("    … \(more) more \(more == 1 ? "category" : "categories")")
    }
    if allocations.generations.count > 1 {
      lines.append("  Generations (growth = allocated in the generation and still live at the end):")
      lines.append(
        "    " + pad("#", 4) + pad("Generation", 22) + leftPad("Growth", 12) + leftPad("Blocks", 9)
          + leftPad("Live at mark", 14) + "  Heaviest growth")
      for generation in allocations.generations {
        let heaviest =
          generation.categories.first.map { category in
            let site = category.allocationStack.programSite.map { " from \($0)" } ?? ""
            return "\(category.name) \(formatBytes(category.growthBytes))\(site)"
          } ?? ""
        lines.append(
          "    " + pad(String(generation.index), 4) + pad(TerminalText.inline(generation.label), 22)
            + leftPad(formatBytes(generation.growthBytes), 12)
            + leftPad(String(generation.growthCount), 9) + leftPad(formatBytes(generation.liveBytes), 14) + "  "
            + heaviest)
      }
    }
    return lines.joined(separator: "\n") + "\n"
  }
}

/// `512 B`, `1.5 KiB`, `12.3 MiB`: ``ByteSize``'s spelling.
public func formatBytes(_ bytes: Int) -> String { ByteSize(bytes: bytes).description }
