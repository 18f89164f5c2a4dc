import Foundation
import PerfHarness

/// One thing a run found, in a sentence: what the text summary and the HTML report open with,
/// before the tables it was read from.
public struct Finding: Codable, Sendable, Equatable {
  /// Which instrument or gate it comes from: `time`, `allocations`, `leaks`, `checks`, `crash`.
  public var kind: String
  public var summary: String
  /// The evidence behind the summary: each thread's heaviest function, what grew, each cycle.
  public var details: [String]
  /// A leak, a growth, a failed check or a crash: something to act on, not only a measurement.
  public var isProblem: Bool

  public init(kind: String, summary: String, details: [String] = [], isProblem: Bool) {
    self.kind = kind
    self.summary = summary
    self.details = details
    self.isProblem = isProblem
  }
}

/// Reads a report's findings from its measurements alone: nothing here knows a scenario.
public enum Findings {
  /// Threads with less of the samples than this are left out of the findings (they are in
  /// the call tree): a finding names where the time went.
  static let minimumThreadPercent = 5.0
  static let maximumThreads = 4

  public static func of(_ report: Report) -> [Finding] {
    var findings: [Finding] = []
    if report.status == .crashed {
      let signal = report.crash?.signal.map { " (\($0))" } ?? ""
      let timedOut = report.crash?.timedOut == true ? "timed out" : "crashed"
      findings.append(
        Finding(
          kind: "crash", summary: "The scenario \(timedOut)\(signal)",
          details: report.error.map { [$0] } ?? [], isProblem: true))
    }
    if let timeProfile = report.timeProfile { findings += time(timeProfile) }
    if let allocations = report.allocations { findings += allocationsFindings(allocations) }
    if let leaks = report.leaks { findings.append(leaksFinding(leaks)) }
    findings.append(checks(report))
    return findings
  }

  // Hide System Libraries semantics: time in libraries is charged to the program function
  // that called them, so the heaviest program function is where a fix would go.
  static func time(_ profile: TimeProfileReport) -> [Finding] {
    let threads = profile.threads.filter { $0.percent >= minimumThreadPercent }
      .sorted { $0.weightMilliseconds > $1.weightMilliseconds }.prefix(maximumThreads)
    var details: [String] = []
    var heaviestOverall: (thread: String, function: FunctionWeight)?
    for thread in threads {
      let name = thread.name + (thread.isMain ? " (main)" : "")
      guard let function = thread.topFunctions.first(where: \.isApp) else {
        details.append(
          "\(name), \(percentText(thread.percent)) of the samples: no program code (system libraries only)")
        continue
      }
      details.append(
        "\(name), \(percentText(thread.percent)) of the samples: \(function.symbol) (\(function.module)) "
          + "\(percentText(function.selfPercent)) self, \(formatMilliseconds(function.selfWeight))")
      if heaviestOverall == nil { heaviestOverall = (name, function) }
    }
    let summary =
      heaviestOverall.map {
        "Heaviest program function: \($0.function.symbol) on \($0.thread), "
          + "\(percentText($0.function.selfPercent)) of that thread's time"
      } ?? "No program function was sampled (\(counted(profile.sampleCount, "sample")))"
    return [Finding(kind: "time", summary: summary, details: details, isProblem: false)]
  }

  // Instruments' Mark Generation reading: the first generation is the warm-up (caches, first
  // use); a generation after it that still holds memory at the end is growth.
  static func allocationsFindings(_ allocations: AllocationsReport) -> [Finding] {
    let totals = allocations.totals
    let later = Array(allocations.generations.dropFirst())
    guard !later.isEmpty else {
      let persistent = persistentProgramTypes(allocations)
      return [
        Finding(
          kind: "allocations",
          summary: "\(formatBytes(totals.persistentBytes)) of \(formatBytes(totals.totalBytes)) allocated "
            + "was still live at the end (no generations marked after the first)",
          details: persistent, isProblem: false)
      ]
    }
    let growing = later.filter { $0.growthBytes > 0 }
    let average = later.reduce(0) { $0 + $1.growthBytes } / later.count
    var grew: [String: (bytes: Int, count: Int)] = [:]
    for generation in later {
      for category in generation.categories {
        grew[category.name, default: (0, 0)].bytes += category.growthBytes
        grew[category.name, default: (0, 0)].count += category.growthCount
      }
    }
    let top = grew.sorted { $0.value.bytes != $1.value.bytes ? $0.value.bytes > $1.value.bytes : $0.key < $1.key }
      .prefix(4)
    var details = top.map { "\($0.key): +\(formatBytes($0.value.bytes)) in \(counted($0.value.count, "block"))" }
    if let largest = later.max(by: { $0.growthBytes < $1.growthBytes }), largest.growthBytes > 0 {
      details.insert(
        "largest: generation \(largest.index) \"\(largest.label)\", +\(formatBytes(largest.growthBytes))", at: 0)
    }
    details += persistentProgramTypes(allocations)
    let summary =
      growing.isEmpty
      ? "No growth: nothing allocated after generation \(allocations.generations[0].index) was still live at the end"
      : "\(growing.count) of \(later.count) generations after the first grew, \(formatBytes(average)) each on average"
    // Library and malloc blocks a generation keeps (a runtime's caches, Dispatch's
    // continuations) are noise a fix cannot reach; the program's own objects kept by a later
    // generation are the tutorial's finding: something holds what should have gone.
    let programTypes = Set(allocations.categories.filter { $0.isApp == true }.map(\.name))
    let programGrew = later.contains { $0.categories.contains { programTypes.contains($0.name) && $0.growthBytes > 0 } }
    return [Finding(kind: "allocations", summary: summary, details: details, isProblem: programGrew)]
  }

  /// The program's own types with instances still alive at the end: a screen that stays alive.
  static func persistentProgramTypes(_ allocations: AllocationsReport) -> [String] {
    let types = allocations.categories.filter { $0.isApp == true && $0.persistentCount > 0 }
      .sorted { $0.persistentBytes > $1.persistentBytes }.prefix(4)
    return types.map { "# Persistent \($0.persistentCount) \($0.name) (\(formatBytes($0.persistentBytes)))" }
  }

  static func leaksFinding(_ leaks: LeaksReport) -> Finding {
    guard leaks.leakedCount > 0 else {
      return Finding(
        kind: "leaks", summary: "No leaks: every block allocated while recording is reachable", isProblem: false)
    }
    let instances = leaks.cycles.reduce(0) { $0 + $1.instances }
    var details: [String] = leaks.cycles.map { cycle in
      let ring = (cycle.nodes.map(\.type) + [cycle.nodes.first?.type ?? ""]).joined(separator: " → ")
      return "cycle × \(cycle.instances): \(ring)"
    }
    details += leaks.rootLeaks.sorted { $0.bytes > $1.bytes }.prefix(4).map {
      "root leak: \($0.count) \($0.type) (\(formatBytes($0.bytes)))"
    }
    let cycles =
      leaks.cycles.isEmpty
      ? "no retain cycle"
      : "\(leaks.cycles.count) retain \(leaks.cycles.count == 1 ? "cycle" : "cycles") × \(instances)"
    return Finding(
      kind: "leaks",
      summary: "\(counted(leaks.leakedCount, "leaked block")) (\(formatBytes(leaks.leakedBytes))), \(cycles)",
      details: details, isProblem: true)
  }

  static func checks(_ report: Report) -> Finding {
    guard report.wasChecked else {
      let summary =
        report.comparison == nil
        ? "No checks ran: --check (thresholds) or --baseline gates a run"
        : "The baseline gated nothing: no figure had both a tolerance and a value in each run"
      return Finding(kind: "checks", summary: summary, isProblem: false)
    }
    let failed = report.checks.filter { !$0.passed }
    var details = failed.map { check in
      "\(check.name): "
        + (check.actual.map { "\(number($0)) against a limit of \(number(check.limit))" } ?? "not measured")
        + (check.detail.map { " (\($0))" } ?? "")
    }
    let regressions = report.comparison?.rows.filter { !$0.passed } ?? []
    details += regressions.map { "regressed against the baseline: \($0.metric)" + ($0.detail.map { " (\($0))" } ?? "") }
    // A pass vouches only for what was gated: the rest is named beside it.
    let ungated = report.notGatedFigures
    details += ungated.map { "not gated: \($0.figure), \($0.measured) (gate with \($0.gatedBy))" }
    let notGated = ungated.isEmpty ? "" : "; not gated: " + ungated.map(\.figure).joined(separator: ", ")
    let gates =
      (report.checks.isEmpty && report.comparison != nil ? [] : [counted(report.checks.count, "check")])
      + (report.comparison == nil ? [] : ["baseline"])
    // Only the gates that ran are counted: a baseline run without --check has no checks to
    // say "0 of 0" about.
    let problems =
      (report.checks.isEmpty ? [] : ["\(failed.count) of \(counted(report.checks.count, "check")) failed"])
      + (regressions.isEmpty ? [] : ["\(counted(regressions.count, "figure")) regressed against the baseline"])
    let summary =
      failed.isEmpty && regressions.isEmpty
      ? "Every check passed (\(gates.joined(separator: ", ")))\(notGated)"
      : problems.joined(separator: ", ") + notGated
    return Finding(
      kind: "checks", summary: summary, details: details, isProblem: !(failed.isEmpty && regressions.isEmpty))
  }

  /// "1 check", "2 checks".
  static func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }

  static func percentText(_ value: Double) -> String { String(format: "%.0f %%", value) }

  static func number(_ value: Double) -> String {
    value == value.rounded() && value.magnitude < 1e15 ? String(Int(value)) : String(format: "%.2f", value)
  }
}
