import Foundation
import PerfHarness

/// The Time Profiler's part of the run summary: threads, top functions and the heaviest
/// paths of the main thread's call tree, with Hide System Libraries.
public enum TimeProfileText {
  /// - Parameters:
  ///   - topFunctions: rows of the Top Functions table.
  ///   - callTreeDepth: depth of the main thread's call tree; 0 leaves the tree out.
  public static func render(_ profile: TimeProfileReport, topFunctions: Int = 8, callTreeDepth: Int = 12) -> String {
    var lines: [String] = []
    let lost = profile.lostSamples > 0 ? ", \(profile.lostSamples) LOST" : ", none lost"
    lines.append(
      "  Time Profiler: \(profile.sampleCount) samples (\(profile.clock) clock, \(profile.sampleRateHz) Hz\(lost)), "
        + "\(formatMilliseconds(profile.totalWeightMilliseconds)) sampled; handler median "
        + String(format: "%.1f µs", profile.handlerMedianMicroseconds))
    for thread in profile.threads.prefix(6) {
      lines.append(
        "    " + pad(thread.name, 24) + leftPad(formatMilliseconds(thread.weightMilliseconds), 10)
          + leftPad(String(format: "%.1f%%", thread.percent), 8))
    }
    if profile.threads.count > 6 {
      lines.append("    … \(profile.threads.count - 6) more threads")
    }
    if let main = profile.threads.first(where: \.isMain), !main.topFunctions.isEmpty {
      lines.append("  Top functions on the Main Thread (Hide System Libraries):")
      let table = CallTreeText.renderTopFunctions(main.topFunctions, limit: topFunctions)
      lines += table.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.isEmpty }.map { "    " + $0 }
    }
    if callTreeDepth > 0, let main = profile.profile.threads.firstIndex(where: \.isMain) {
      let tree = CallTree(profile: profile.profile, options: .init(hideSystemLibraries: true), threads: [main])
      if !tree.roots.isEmpty {
        lines.append("  Call tree of the Main Thread (Hide System Libraries; rows under 5% folded):")
        let text = CallTreeText.render(tree, maxDepth: callTreeDepth, minPercent: 5, topN: 3)
        lines += text.split(separator: "\n").map { "    " + $0 }
      }
    }
    return lines.joined(separator: "\n") + "\n"
  }
}
