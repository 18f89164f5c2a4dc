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
    name: .customLong(Limit.maxGrowthPerGeneration.flag!),
    help: ArgumentHelp(Limit.maxGrowthPerGeneration.summary, valueName: "size"))
  var maxGrowth: String?

  @Option(
    name: .customLong(Limit.maxLeakedBytes.flag!), help: ArgumentHelp(Limit.maxLeakedBytes.summary, valueName: "size"))
  var maxLeakedBytes: String?

  @Option(
    name: .customLong(Limit.maxPeakHeap.flag!), help: ArgumentHelp(Limit.maxPeakHeap.summary, valueName: "size"))
  var maxPeakHeap: String?

  @Option(
    name: .customLong(Limit.maxPersistent.flag!),
    help: ArgumentHelp(Limit.maxPersistent.summary, valueName: "type=n"))
  var maxPersistent: [String] = []

  @Option(
    name: .customLong(Limit.minCoverage.flag!), help: ArgumentHelp(Limit.minCoverage.summary, valueName: "percent"))
  var minCoverage: String?

  @Flag(name: .customLong(Limit.maxCycles.flag!), help: ArgumentHelp(Limit.maxCycles.summary))
  var noCycles = false

  /// The limits given on the command line.
  func overrides() throws -> Thresholds {
    var result = Thresholds()
    let given: [(Limit, [String])] = [
      (.maxGrowthPerGeneration, maxGrowth.map { [$0] } ?? []), (.maxLeakedBytes, maxLeakedBytes.map { [$0] } ?? []),
      (.maxPeakHeap, maxPeakHeap.map { [$0] } ?? []), (.maxPersistent, maxPersistent),
      (.minCoverage, minCoverage.map { [$0] } ?? []),
    ]
    do {
      for (limit, texts) in given {
        for text in texts { try limit.set(text, in: &result, source: "--\(limit.flag!)") }
      }
    } catch {
      throw ValidationError(error.message)
    }
    if noCycles { Limit.maxCycles.set(.count(0), in: &result) }
    return result
  }

  /// The accepted limit flags, for messages.
  static var limitFlags: String { Limit.all.compactMap(\.flagUsage).joined(separator: ", ") }

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
