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
        let slack = period(profile) * Double(max(1, profile.threads.count))
        line +=
          "; coverage \(coverageText(coverage, of: cpu, slack: slack, decimals: 1)) of \(formatMilliseconds(cpu)) CPU time"
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
        short == 1
          ? "    1 thread under one period of CPU time, without a sample ("
            + formatMilliseconds(profile.shortThreadsCPUMilliseconds ?? 0) + " CPU)"
          : "    \(short) threads under one period of CPU time each, without a sample ("
            + formatMilliseconds(profile.shortThreadsCPUMilliseconds ?? 0) + " CPU together)")
    }
    for thread in profile.threads.prefix(6) {
      // Each thread's own rate and coverage: a thread the sampler under-served shows here
      // even when the whole run's coverage looks fine.
      var measured: [String] = []
      if let rate = thread.samplesPerCPUSecond { measured.append(String(format: "%.0f /CPU s", rate)) }
      if let coverage = thread.coveragePercent, let cpu = thread.cpuMilliseconds {
        measured.append("coverage " + coverageText(coverage, of: cpu, slack: period(profile), decimals: 0))
      }
      lines.append(
        "    " + pad(TerminalText.inline(thread.name), 24) + leftPad(formatMilliseconds(thread.weightMilliseconds), 10)
          + leftPad(String(format: "%.1f%%", thread.percent), 8)
          + (measured.isEmpty ? "" : "  " + measured.joined(separator: ", ")))
    }
    if profile.threads.count > 6 {
      lines.append("    … \(profile.threads.count - 6) more \(profile.threads.count == 7 ? "thread" : "threads")")
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
  /// A sampling period, in ms.
  static func period(_ profile: TimeProfileReport) -> Double {
    1000 / Double(max(1, profile.sampleRateHz))
  }

  /// Coverage as shown. The samples and the CPU time are counted by different clocks (a
  /// perf event's or timer's, and the thread's CPU clock; they differed by 0.2–0.3 % in the
  /// tutorial's runs), and a sample stands for a whole period, so a thread sampled throughout
  /// reads a little over 100 % (100.3 %). Up to 1 % of the CPU time plus `slack` ms (a period
  /// per thread) over, that is the measurement and reads 100 %; beyond it the measured
  /// figure is shown, an over-count worth a look. The JSON keeps the measured ratio.
  static func coverageText(_ percent: Double, of cpuMilliseconds: Double, slack: Double, decimals: Int) -> String {
    let over = (percent - 100) / 100 * cpuMilliseconds
    let shown = percent > 100 && over <= cpuMilliseconds / 100 + slack ? 100 : percent
    return String(format: "%.\(decimals)f%%", shown)
  }

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
