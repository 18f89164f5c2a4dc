import ArgumentParser
import Foundation
import PerfHarness

/// `--check` and the limits that override a scenario's or program's thresholds file, their
/// help in `Subject`'s words.
struct CheckOptions<Subject: RecordedSubject>: ParsableArguments {
  @Flag(help: "Evaluate \(Subject.thresholds); exit 2 when one fails.")
  var check = false

  @Option(
    help: ArgumentHelp(
      "Folder of thresholds files, one \(Subject.thresholdsFile) each.", valueName: "dir"))
  var thresholds: String = "Scenarios/thresholds"

  @Option(
    name: .customLong(Limit.maxGrowthPerGeneration.flag!),
    help: ArgumentHelp(Limit.maxGrowthPerGeneration.summary, valueName: "size"),
    transform: value(of: .maxGrowthPerGeneration))
  var maxGrowth: Limit.Value?

  @Option(
    name: .customLong(Limit.maxLeakedBytes.flag!), help: ArgumentHelp(Limit.maxLeakedBytes.summary, valueName: "size"),
    transform: value(of: .maxLeakedBytes))
  var maxLeakedBytes: Limit.Value?

  @Option(
    name: .customLong(Limit.maxPeakHeap.flag!), help: ArgumentHelp(Limit.maxPeakHeap.summary, valueName: "size"),
    transform: value(of: .maxPeakHeap))
  var maxPeakHeap: Limit.Value?

  @Option(
    name: .customLong(Limit.maxPersistent.flag!),
    help: ArgumentHelp(Limit.maxPersistent.summary, valueName: "type=n"), transform: value(of: .maxPersistent))
  var maxPersistent: [Limit.Value] = []

  @Option(
    name: .customLong(Limit.minCoverage.flag!), help: ArgumentHelp(Limit.minCoverage.summary, valueName: "percent"),
    transform: value(of: .minCoverage))
  var minCoverage: Limit.Value?

  @Flag(name: .customLong(Limit.maxCycles.flag!), help: ArgumentHelp(Limit.maxCycles.summary))
  var noCycles = false

  /// Parses a limit flag's value in the form the limits table gives it.
  static func value(of limit: Limit) -> @Sendable (String) throws -> Limit.Value {
    { text in
      guard let value = limit.parse(text) else {
        throw ValidationError(limit.rejection(of: text))
      }
      return value
    }
  }

  /// The limits given on the command line.
  func overrides() -> Thresholds {
    var result = Thresholds()
    let given: [(Limit, [Limit.Value])] = [
      (.maxGrowthPerGeneration, maxGrowth.map { [$0] } ?? []), (.maxLeakedBytes, maxLeakedBytes.map { [$0] } ?? []),
      (.maxPeakHeap, maxPeakHeap.map { [$0] } ?? []), (.maxPersistent, maxPersistent),
      (.minCoverage, minCoverage.map { [$0] } ?? []),
    ]
    for (limit, values) in given {
      for value in values { limit.set(value, in: &result) }
    }
    if noCycles { Limit.maxCycles.set(.count(0), in: &result) }
    return result
  }

  /// The accepted limit flags, for messages.
  static var limitFlags: String { Limit.all.compactMap(\.flagUsage).joined(separator: ", ") }

  /// The thresholds for `scenario`: its file (if any) overridden by the flags.
  func thresholds(for scenario: Scenario) throws -> Thresholds {
    try thresholds(named: scenario.name)
  }

  /// The thresholds for the scenario or recorded program `name`: `<name>.yaml` (if any)
  /// overridden by the flags.
  func thresholds(named name: String) throws -> Thresholds {
    try requireThresholdsFolder()
    let path = URL(fileURLWithPath: thresholds).appendingPathComponent("\(name).yaml").path
    let fromFile: Thresholds
    if FileManager.default.fileExists(atPath: path) {
      do {
        fromFile = try Thresholds.load(contentsOf: path)
      } catch {
        throw ValidationError("thresholds file \(error)")
      }
    } else {
      fromFile = Thresholds()
    }
    return fromFile.overridden(by: overrides())
  }

  /// A file given as the folder would be looked into for `<scenario>.yaml`, found empty, and
  /// the limits it holds silently dropped.
  private func requireThresholdsFolder() throws {
    var isFolder: ObjCBool = false
    guard FileManager.default.fileExists(atPath: thresholds, isDirectory: &isFolder), !isFolder.boolValue else {
      return
    }
    throw ValidationError(
      "--thresholds \(thresholds) is \(BoundedFile.specialKind(at: thresholds) ?? "a file"), not a folder; accepted: a folder of <scenario>.yaml thresholds files"
    )
  }

  /// `--check` with nothing to check would pass whatever the run measured.
  func requireThresholds(named name: String) throws {
    guard check, try thresholds(named: name).isEmpty else { return }
    throw ValidationError(
      "--check: no thresholds for \(name): no \(thresholds)/\(name).yaml; accepted: "
        + "that file (see --thresholds DIR) or limit flags (\(CheckOptions.limitFlags))")
  }

  /// Judges a finished run: with `--check` its thresholds (`name`'s), with a baseline the
  /// comparison; a check that fails or a figure that regressed makes a passed run failed.
  func judge(
    _ report: inout Report, named name: String, baseline: (report: Report, path: String)?,
    tolerances: ComparisonTolerances
  ) throws {
    if check {
      report.checks = ThresholdCheck.evaluate(try thresholds(named: name), on: report)
      if report.status == .passed && report.checks.contains(where: { !$0.passed }) { report.status = .failed }
    }
    if let baseline {
      let comparison = BaselineComparison.compare(
        report, with: baseline.report, baselinePath: baseline.path, tolerances: tolerances)
      report.comparison = comparison
      if report.status == .passed && !comparison.passed { report.status = .failed }
    }
    report.checked = check || (report.comparison?.judgedAnything ?? false)
    report.notGated = report.checked == true ? report.ungatedFigures() : nil
  }
}
