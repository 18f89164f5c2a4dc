import Foundation
import PerfHarness

/// The Time Profiler's part of the run summary: threads, top functions and the heaviest
/// paths of the call tree, with Hide System Libraries, of every thread merged (or of the one
/// thread sampled).
public enum TimeProfileText {
  /// - Parameters:
  ///   - topFunctions: rows of the Top Functions table.
  ///   - callTreeDepth: depth of the call tree; 0 leaves the tree out.
  public static func render(_ profile: TimeProfileReport, topFunctions: Int = 8, callTreeDepth: Int = 12) -> String {
    var lines: [String] = []
    let lost = profile.lostSamples > 0 ? ", \(profile.lostSamples) LOST" : ", none lost"
    lines.append(
      "  Time Profiler: \(profile.sampleCount) samples (\(profile.clock) clock, \(profile.sampleRateHz) Hz\(lost)), "
        + "\(formatMilliseconds(profile.totalWeightMilliseconds)) sampled; handler median "
        + String(format: "%.1f µs", profile.handlerMedianMicroseconds))
    if let source = profile.sampleSource {
      var line = "    source: \(source)"
      if let rate = profile.samplesPerCPUSecond { line += String(format: ", %.0f samples per CPU second", rate) }
      if let coverage = profile.coveragePercent, let cpu = profile.cpuMilliseconds {
        line += String(format: "; coverage %.1f%% of %@ CPU time", coverage, formatMilliseconds(cpu))
      }
      lines.append(line)
    }
    if let note = profile.sampleSourceNote { lines.append("    \(note)") }
    if let note = profile.signalHandlerNote { lines.append("    SIGPROF: \(note)") }
    for thread in profile.unsampled ?? [] {
      let cpu = thread.cpuMilliseconds.map { " (\(formatMilliseconds($0)) CPU)" } ?? ""
      lines.append("    UNSAMPLED: \(TerminalText.inline(thread.name)) [\(thread.threadID)]\(cpu): \(thread.reason)")
    }
    if let short = profile.shortThreads, short > 0 {
      lines.append(
        "    \(short) threads under one period of CPU time each, without a sample ("
          + formatMilliseconds(profile.shortThreadsCPUMilliseconds ?? 0) + " CPU together)")
    }
    for thread in profile.threads.prefix(6) {
      // Each thread's own rate and coverage: a thread the sampler under-served shows here
      // even when the whole run's coverage looks fine.
      var measured: [String] = []
      if let rate = thread.samplesPerCPUSecond { measured.append(String(format: "%.0f /CPU s", rate)) }
      if let coverage = thread.coveragePercent { measured.append(String(format: "coverage %.0f%%", coverage)) }
      lines.append(
        "    " + pad(TerminalText.inline(thread.name), 24) + leftPad(formatMilliseconds(thread.weightMilliseconds), 10)
          + leftPad(String(format: "%.1f%%", thread.percent), 8)
          + (measured.isEmpty ? "" : "  " + measured.joined(separator: ", ")))
    }
    if profile.threads.count > 6 {
      lines.append("    … \(profile.threads.count - 6) more threads")
    }
    let subject = Subject(profile)
    let functions = subject.thread?.topFunctions ?? profile.topFunctions
    if !functions.isEmpty {
      lines.append("  Top functions \(subject.heading) (Hide System Libraries):")
      let table = CallTreeText.renderTopFunctions(functions, limit: topFunctions)
      lines += table.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.isEmpty }.map { "    " + $0 }
    }
    if callTreeDepth > 0 {
      let tree = CallTree(
        profile: profile.profile, options: .init(hideSystemLibraries: true), threads: subject.profileThreads,
        pruning: CallTreePruning(minimumFraction: 0.05, maxDepth: callTreeDepth))
      if !tree.roots.isEmpty {
        lines.append("  Call tree \(subject.heading) (Hide System Libraries; rows under 5% folded):")
        let text = CallTreeText.render(tree, maxDepth: callTreeDepth, minPercent: 5, topN: 3)
        lines += text.split(separator: "\n").map { "    " + $0 }
      }
    }
    return lines.joined(separator: "\n") + "\n"
  }
}

extension TimeProfileText {
  /// Whose functions and call tree the summary shows: every thread merged, as Instruments'
  /// call tree does without Separate by Thread. A server's main thread starts it up in a
  /// few ms while its workers do the work, often the same work on several threads: merged,
  /// their samples add up on one path, where any one thread would show only its share. When
  /// one thread does nearly everything (a scenario on the main thread) merged is that thread.
  /// The threads table above and the findings still split the time by thread.
  struct Subject {
    /// The one thread with samples; nil when several have them.
    var thread: TimeProfileReport.ThreadSummary?
    /// Its index in the profile's threads, for the call tree; nil means all.
    var profileThreads: Set<Int>?
    var heading: String

    init(_ profile: TimeProfileReport) {
      let sampled = profile.threads.filter { $0.sampleCount > 0 }
      if sampled.count == 1, let only = sampled.first,
        let index = profile.profile.threads.firstIndex(where: { $0.threadID == only.threadID && $0.name == only.name })
      {
        thread = only
        profileThreads = [index]
        heading = only.isMain ? "of the Main Thread" : "of \(TerminalText.inline(only.name)) [\(only.threadID)]"
      } else {
        thread = nil
        profileThreads = nil
        heading = "of all \(sampled.count) threads merged"
      }
    }
  }
}
