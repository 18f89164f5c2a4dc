import Foundation
import PerfHarness

/// Reads and writes the JSON report.
public enum ReportJSON {
  /// Pretty, key-sorted JSON: stable diffs between runs.
  public static func encode(_ report: Report, pretty: Bool = true) throws -> Data {
    let encoder = JSONEncoder()
    encoder.outputFormatting =
      pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
    encoder.nonConformingFloatEncodingStrategy = .convertToString(
      positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
    return try encoder.encode(report)
  }

  public static func decode(_ data: Data) throws -> Report {
    try JSONDecoder().decode(Report.self, from: data)
  }
}
