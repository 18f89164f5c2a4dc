import ArgumentParser
import Foundation
import PerfHarness

/// How much a figure may grow over its baseline: shared by `compare` and `scenario --baseline`.
struct ComparisonOptions: ParsableArguments {
  @Option(
    help: ArgumentHelp(
      "Memory and leak figures may grow by this many percent over the baseline.", valueName: "percent"))
  var tolerance: Double = 10

  @Option(
    name: .customLong("time-tolerance"),
    help: ArgumentHelp(
      "Gate times too: wall, sampled and step times may grow by this many percent (default: shown, not gated).",
      valueName: "percent"))
  var timeTolerance: Double?

  @Option(
    name: .customLong("peak-tolerance"),
    help: ArgumentHelp(
      "Gate the peak heap too: it may grow by this many percent (default: shown, not gated, since it moves with how background work is scheduled).",
      valueName: "percent"))
  var peakTolerance: Double?

  @Option(
    name: .customLong("min-increase"),
    help: ArgumentHelp("Byte figures never fail for an increase up to this size (e.g. 4KB).", valueName: "size"))
  var minIncrease: String = "4KiB"

  @Flag(
    name: .customLong("allow-different-setup"),
    help:
      "Compare with a baseline of another scenario, program or variant, or recorded with other iterations or instruments (default: refused, exit 64)."
  )
  var allowDifferentSetup = false

  func tolerances() throws -> ComparisonTolerances {
    for (flag, value) in [
      ("--tolerance", tolerance), ("--time-tolerance", timeTolerance), ("--peak-tolerance", peakTolerance),
    ] {
      guard let value else { continue }
      if !(value.isFinite && value >= 0) {
        throw ValidationError("\(flag) '\(value)' is not a percentage; accepted: a number >= 0 (e.g. 10 or 2.5)")
      }
      // The report stores the tolerances: beyond its largest quantity it would not read back.
      if value > Report.largestQuantity {
        throw ValidationError(
          "\(flag) '\(value)' is too large; accepted: a number from 0 to \(Limit.largestValue) (e.g. 10 or 2.5)")
      }
    }
    guard let bytes = ByteSize.magnitude(parsing: minIncrease) else {
      throw ValidationError("--min-increase '\(minIncrease)' is not a size; accepted: \(ByteSize.acceptedForms)")
    }
    guard bytes <= Double(Limit.largestValue) else {
      throw ValidationError("--min-increase '\(minIncrease)' is too large; accepted: \(Limit.Form.size.range)")
    }
    return ComparisonTolerances(
      percent: tolerance, timePercent: timeTolerance, peakPercent: peakTolerance, minimumBytes: Int(bytes.rounded()),
      allowsDifferentSetup: allowDifferentSetup)
  }
}

/// Where `--baseline` finds the stored report for a scenario run.
struct BaselineSource {
  var path: String

  /// A report file holds one scenario; a folder holds `<scenario>/<variant>/report.json`
  /// as `--output` writes them.
  func reportPath(scenario: String, variant: String) throws -> String {
    try reportPath(in: ["\(scenario)/\(variant)"], layout: "<scenario>/<variant>/report.json")
  }

  /// The file itself, or in a folder the first of `folders` (relative) that holds a
  /// report.json; `layout` names the accepted form in messages.
  func reportPath(in folders: [String], layout: String) throws -> String {
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
      throw ValidationError("--baseline '\(path)' does not exist; accepted: a report.json, or a folder of \(layout)")
    }
    guard isDirectory.boolValue else { return path }
    let files = folders.map {
      URL(fileURLWithPath: path).appendingPathComponent($0).appendingPathComponent("report.json").path
    }
    guard let file = files.first(where: { FileManager.default.fileExists(atPath: $0) }) else {
      throw ValidationError("--baseline folder '\(path)' has no report there: no \(files[0])")
    }
    return file
  }

  /// The baseline for a run set up as `run`, read and checked to be able to judge it.
  func report(for run: Report.ScenarioInfo, tolerances: ComparisonTolerances) throws -> (report: Report, path: String) {
    try report(at: try reportPath(scenario: run.name, variant: run.variant), for: run, tolerances: tolerances)
  }

  /// The report in `file`, checked to be complete and able to judge a run set up as `run`.
  func report(
    at file: String, for run: Report.ScenarioInfo, tolerances: ComparisonTolerances
  ) throws -> (report: Report, path: String) {
    let report: Report
    do {
      report = try StoredReport.read(file)
    } catch {
      throw ValidationError("--baseline: \(error)")
    }
    try Self.refuseIncomplete(report, file: file, flag: "--baseline")
    try Self.refuseIncomparable(
      report, file: file, flag: "--baseline", run: run, runName: "this run", tolerances: tolerances)
    return (report, file)
  }

  /// A baseline set up otherwise than the run measures another run: held against it, a
  /// regression or a pass says nothing about the change, so it is a usage error unless
  /// `--allow-different-setup` says it is intended. So is a baseline that lacks the figure a
  /// gate asked for by name (see ``BaselineComparison/explicitGatesLacking(in:instruments:tolerances:)``).
  static func refuseIncomparable(
    _ baseline: Report, file: String, flag: String, run: Report.ScenarioInfo, runName: String,
    tolerances: ComparisonTolerances
  ) throws {
    let differences = BaselineComparison.setupDifferences(run, baseline: baseline.scenario)
    if !differences.isEmpty && !tolerances.allowsDifferentSetup {
      let listed = differences.map { "\($0.name) \($0.baseline) (\(runName): \($0.current))" }
      let folderHint =
        differences.contains { $0.name == "scenario" }
        ? " (for several scenarios, a folder of <scenario>/<variant>/report.json)" : ""
      throw ValidationError(
        "\(flag) \(file) was recorded with another setup: \(listed.joined(separator: ", ")); its figures measure another run; accepted: a report of the same scenario, variant, iterations and instruments\(folderHint), or --allow-different-setup to compare anyway"
      )
    }
    let lacking = BaselineComparison.explicitGatesLacking(
      in: baseline, instruments: Set(run.instruments), tolerances: tolerances)
    guard !lacking.isEmpty else { return }
    throw ValidationError(
      "\(flag) \(file) cannot serve the gates asked for: \(lacking.joined(separator: "; ")); accepted: a baseline that measured those figures, or leave those tolerances out"
    )
  }

  /// A baseline from a run that crashed or did not pass its own run measured less than a
  /// whole run: every figure it lacks would read "not measured in the baseline" and pass.
  /// So is one whose recorder counted losses: its figures lack what was lost.
  static func refuseIncomplete(_ report: Report, file: String, flag: String) throws {
    if report.status == .crashed || report.status == .interrupted {
      throw ValidationError(
        "\(flag) \(file) is the report of a run that \(report.status == .crashed ? "crashed" : "was interrupted") (\(report.error ?? "no reason given")): its figures are partial; accepted: the report of a run that completed"
      )
    }
    let losses = ThresholdCheck.losses(in: report).filter { !$0.passed }
    guard !losses.isEmpty else { return }
    throw ValidationError(
      "\(flag) \(file) is the report of a run that lost data (\(losses.map { "\($0.name): \($0.detail ?? "")" }.joined(separator: "; "))): its figures are partial; accepted: the report of a run whose recording lost nothing"
    )
  }
}
