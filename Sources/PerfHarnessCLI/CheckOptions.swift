import ArgumentParser
import Foundation
import PerfHarness

/// `--check` and the limits that override a scenario's thresholds file.
struct CheckOptions: ParsableArguments {
  @Flag(help: "Evaluate the scenario's thresholds; exit 2 when one fails.")
  var check = false

  @Option(
    help: ArgumentHelp(
      "Folder of thresholds files, one <scenario>.yaml each.", valueName: "dir"))
  var thresholds: String = "Scenarios/thresholds"

  @Option(
    name: .customLong("max-growth"),
    help: ArgumentHelp("Most growth of any generation after the warm-up (e.g. 64KB, 1MiB).", valueName: "size"))
  var maxGrowth: String?

  @Option(
    name: .customLong("max-leaked-bytes"), help: ArgumentHelp("Most bytes in leaked blocks.", valueName: "size"))
  var maxLeakedBytes: String?

  @Option(
    name: .customLong("max-peak-heap"), help: ArgumentHelp("Most live heap at any time.", valueName: "size"))
  var maxPeakHeap: String?

  @Option(
    name: .customLong("max-persistent"),
    help: ArgumentHelp("Most live instances of a type at the end: TYPE=N (repeatable).", valueName: "type=n"))
  var maxPersistent: [String] = []

  @Option(
    name: .customLong("min-coverage"),
    help: ArgumentHelp(
      "Least share of the threads' CPU time the Time Profiler's samples must stand for (e.g. 95%).",
      valueName: "percent"))
  var minCoverage: String?

  @Flag(name: .customLong("no-cycles"), help: "Fail on any retain cycle.")
  var noCycles = false

  /// The limits given on the command line.
  func overrides() throws -> Thresholds {
    var result = Thresholds()
    func size(_ text: String?, flag: String) throws -> ByteSize? {
      guard let text else { return nil }
      guard let size = ByteSize(parsing: text) else {
        throw ValidationError("\(flag) '\(text)' is not a size; accepted: \(ByteSize.acceptedForms)")
      }
      return size
    }
    result.maxGrowthPerGeneration = try size(maxGrowth, flag: "--max-growth")
    result.maxLeakedBytes = try size(maxLeakedBytes, flag: "--max-leaked-bytes")
    result.maxPeakHeap = try size(maxPeakHeap, flag: "--max-peak-heap")
    for item in maxPersistent {
      let parts = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
      guard parts.count == 2, !parts[0].isEmpty, let limit = Int(parts[1]), limit >= 0 else {
        throw ValidationError(
          "--max-persistent '\(item)' is not TYPE=N; accepted: a module-qualified type name, '=', a whole number (e.g. MyApp.Screen=1)"
        )
      }
      result.maxPersistent[parts[0]] = limit
    }
    if noCycles { result.maxCycles = 0 }
    if let minCoverage {
      guard let percent = Thresholds.percent(parsing: minCoverage) else {
        throw ValidationError(
          "--min-coverage '\(minCoverage)' is not a percentage; accepted: \(Thresholds.percentForms)")
      }
      result.minCoveragePercent = percent
    }
    return result
  }

  /// The thresholds for `scenario`: its file (if any) overridden by the flags.
  func thresholds(for scenario: Scenario) throws -> Thresholds {
    let path = URL(fileURLWithPath: thresholds).appendingPathComponent("\(scenario.name).yaml").path
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
    return fromFile.overridden(by: try overrides())
  }
}
