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

  /// A document whose `schemaVersion` is not ``Report/currentSchemaVersion``: nil when it
  /// has none (or is not an object). Checked before the rest is decoded, so a report of
  /// another version is named as such, not as corrupt.
  public struct OtherVersion: Error {
    public var version: Int?
  }

  /// Decodes a report and checks what the types alone cannot: indices point into their
  /// tables and every quantity is one a run can measure. The renderers index and convert
  /// without further checks, so a corrupt file must stop here.
  ///
  /// One parse: the version is read from the decoder's own parse of the document. A
  /// separate `JSONSerialization` pass only to read it built an object per value and took
  /// most of the 12.8 GB a 219 MB report needed (docs/measurements.md).
  /// - Throws: `OtherVersion`; `DecodingError.dataCorrupted` naming the path of the bad
  ///   value, or of a key that appears twice in one object (an empty path with an
  ///   underlying error: the bytes are not JSON).
  public static func decode(_ data: Data) throws -> Report {
    if let duplicate = DuplicateKeys.first(in: data) {
      throw ReportValidation.corrupt(
        duplicate.path + [duplicate.key],
        "the key '\(duplicate.key)' appears twice in one object; accepted: each key once (readers disagree on which one counts)"
      )
    }
    let report = try JSONDecoder().decode(VersionedReport.self, from: data).report
    try ReportValidation.checkQuantities(report, path: [])
    if let profile = report.timeProfile?.profile {
      try ReportValidation.checkProfile(profile, path: ["timeProfile", "profile"])
    }
    return report
  }
}

/// A report whose version is read before the rest is decoded.
private struct VersionedReport: Decodable {
  private enum Key: String, CodingKey { case schemaVersion }
  var report: Report

  init(from decoder: any Decoder) throws {
    let version = try? decoder.container(keyedBy: Key.self).decodeIfPresent(Int.self, forKey: .schemaVersion)
    guard version == Report.currentSchemaVersion else { throw ReportJSON.OtherVersion(version: version) }
    report = try Report(from: decoder)
  }
}

/// What a well-formed report satisfies beyond its types.
enum ReportValidation {
  /// See ``Report/largestQuantity``.
  static let largestQuantity = Report.largestQuantity

  struct PathKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(stringValue: String) { self.stringValue = stringValue }
    init(intValue: Int) {
      stringValue = String(intValue)
      self.intValue = intValue
    }
  }

  static func corrupt(_ path: [String], _ message: String) -> DecodingError {
    DecodingError.dataCorrupted(.init(codingPath: path.map(PathKey.init(stringValue:)), debugDescription: message))
  }

  /// Every number in the report outside the profile (checked by `checkProfile`, whose
  /// sample stacks would make a reflective walk slow) is finite and within ±``largestQuantity``.
  static func checkQuantities(_ value: Any, path: [String]) throws {
    func outOfRange(_ number: String) -> DecodingError {
      corrupt(path, "\(number) is out of range; accepted: a finite number within ±\(largestQuantity)")
    }
    switch value {
    case let number as Double:
      guard number.isFinite, number.magnitude <= largestQuantity else { throw outOfRange("\(number)") }
    case let number as Int:
      guard Double(number.magnitude) <= largestQuantity else { throw outOfRange("\(number)") }
    case is String, is Bool, is Int32, is Profile:
      return
    default:
      let mirror = Mirror(reflecting: value)
      for (index, child) in mirror.children.enumerated() {
        switch mirror.displayStyle {
        case .optional: try checkQuantities(child.value, path: path)
        case .collection, .set: try checkQuantities(child.value, path: path + [String(index)])
        default: try checkQuantities(child.value, path: path + [child.label ?? String(index)])
        }
      }
    }
  }

  static func checkProfile(_ profile: Profile, path: [String]) throws {
    let interval = profile.sampleIntervalMilliseconds
    guard interval.isFinite, interval > 0, interval <= largestQuantity else {
      throw corrupt(path + ["sampleIntervalMilliseconds"], "\(interval) is not a positive sampling interval")
    }
    for (index, frame) in profile.frames.enumerated() {
      if let line = frame.line, line < 0 || Double(line) > largestQuantity {
        throw corrupt(path + ["frames", String(index), "line"], "\(line) is not a line number")
      }
    }
    for (index, sample) in profile.samples.enumerated() {
      let samplePath = path + ["samples", String(index)]
      guard profile.threads.indices.contains(sample.thread) else {
        throw corrupt(
          samplePath + ["thread"], "thread index \(sample.thread) is not one of the \(profile.threads.count) threads")
      }
      guard sample.weight.isFinite, sample.weight >= 0, sample.weight <= largestQuantity else {
        throw corrupt(samplePath + ["weight"], "\(sample.weight) is not a sample weight in milliseconds")
      }
      if let timestamp = sample.timestamp, !timestamp.isFinite || timestamp.magnitude > largestQuantity {
        throw corrupt(samplePath + ["timestamp"], "\(timestamp) is not a time in milliseconds")
      }
      if let bad = sample.stack.firstIndex(where: { !profile.frames.indices.contains($0) }) {
        throw corrupt(
          samplePath + ["stack", String(bad)],
          "frame index \(sample.stack[bad]) is not one of the \(profile.frames.count) frames")
      }
    }
  }
}

/// Finds a key that appears twice in one JSON object. JSON leaves duplicates undefined:
/// Foundation's decoder keeps one, a browser's JSON.parse the last, so a hand-edited report
/// with `"status"` twice read "failed" in the CLI and "passed" in its HTML page. Every
/// report reader refuses such a file instead (``ReportJSON/decode(_:)``). One pass over the
/// bytes; malformed JSON is left to the decoder.
enum DuplicateKeys {
  private enum Frame {
    case object(keys: Set<String>, current: String?, expectingKey: Bool)
    case array(index: Int)
  }

  /// The path of the object holding the first duplicated key, and the key.
  static func first(in data: Data) -> (path: [String], key: String)? {
    data.withUnsafeBytes { raw -> (path: [String], key: String)? in
      let bytes = raw.bindMemory(to: UInt8.self)
      var stack: [Frame] = []
      var index = 0
      while index < bytes.count {
        let byte = bytes[index]
        switch byte {
        case UInt8(ascii: "\""):
          let start = index + 1
          var end = start
          var escaped = false
          while end < bytes.count && bytes[end] != UInt8(ascii: "\"") {
            if bytes[end] == UInt8(ascii: "\\") {
              escaped = true
              end += 1
            }
            end += 1
          }
          guard end < bytes.count else { return nil }
          index = end
          if case .object(var keys, _, true) = stack.last {
            let rawKey = Data(bytes[start..<end])
            let key =
              escaped
              ? (try? JSONDecoder().decode(
                String.self, from: Data([UInt8(ascii: "\"")]) + rawKey + Data([UInt8(ascii: "\"")])))
                ?? String(decoding: rawKey, as: UTF8.self)
              : String(decoding: rawKey, as: UTF8.self)
            if !keys.insert(key).inserted { return (path(of: stack.dropLast()), key) }
            stack[stack.count - 1] = .object(keys: keys, current: key, expectingKey: false)
          }
        case UInt8(ascii: "{"):
          stack.append(.object(keys: [], current: nil, expectingKey: true))
        case UInt8(ascii: "["):
          stack.append(.array(index: 0))
        case UInt8(ascii: "}"), UInt8(ascii: "]"):
          if !stack.isEmpty { stack.removeLast() }
        case UInt8(ascii: ","):
          switch stack.last {
          case .object(let keys, let current, _):
            stack[stack.count - 1] = .object(keys: keys, current: current, expectingKey: true)
          case .array(let position): stack[stack.count - 1] = .array(index: position + 1)
          case nil: break
          }
        default:
          break
        }
        index += 1
      }
      return nil
    }
  }

  private static func path(of frames: ArraySlice<Frame>) -> [String] {
    frames.compactMap { frame in
      switch frame {
      case .object(_, let current, _): return current
      case .array(let index): return String(index)
      }
    }
  }
}
