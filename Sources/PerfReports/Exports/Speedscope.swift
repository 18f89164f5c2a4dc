import Foundation
import PerfHarness

/// The speedscope file format (https://www.speedscope.app/file-format-schema.json), which
/// speedscope.app, Perfetto's and several IDEs' viewers open.
public enum Speedscope {
  /// One `"sampled"` profile per thread that has samples (in thread order, named after the
  /// thread), in milliseconds; the main thread's is the active one. Frames are functions (name
  /// and module merged, as in the call tree) with a representative file and line; when no file
  /// is known the module goes in `file`, so system frames still say where they come from.
  /// Samples keep recording order, or timestamp order when every sample has a timestamp;
  /// `startValue` is the first timestamp (else 0) and `endValue` adds the summed weights.
  public static func render(_ profile: Profile, name: String) throws -> Data {
    var frames: [FileFormat.Frame] = []
    var functionIndex: [FunctionKey: Int] = [:]
    let frameToFunction: [Int] = profile.frames.map { frame in
      let key = FunctionKey(name: frame.name, module: frame.module)
      if let existing = functionIndex[key] { return existing }
      functionIndex[key] = frames.count
      frames.append(
        FileFormat.Frame(
          name: frame.name, file: frame.file ?? (frame.module.isEmpty ? nil : frame.module), line: frame.line))
      return frames.count - 1
    }
    var unknownFrame: Int?

    var samplesByThread: [Int: [ProfileSample]] = [:]
    for sample in profile.samples { samplesByThread[sample.thread, default: []].append(sample) }

    var profiles: [FileFormat.Profile] = []
    var activeProfileIndex = 0
    for thread in samplesByThread.keys.sorted() {
      var samples = samplesByThread[thread]!
      if samples.allSatisfy({ $0.timestamp != nil }) {
        // Sorting an enumerated copy keeps equal timestamps in recording order.
        samples = samples.enumerated().sorted { a, b in
          a.element.timestamp! != b.element.timestamp!
            ? a.element.timestamp! < b.element.timestamp! : a.offset < b.offset
        }.map(\.element)
      }
      var stacks: [[Int]] = []
      var weights: [Double] = []
      stacks.reserveCapacity(samples.count)
      weights.reserveCapacity(samples.count)
      for sample in samples {
        stacks.append(
          sample.stack.map { frame in
            if frameToFunction.indices.contains(frame) { return frameToFunction[frame] }
            if let unknownFrame { return unknownFrame }
            frames.append(FileFormat.Frame(name: ProfileFunction.unknown.name, file: nil, line: nil))
            unknownFrame = frames.count - 1
            return frames.count - 1
          })
        weights.append(sample.weight)
      }
      let isMain = profile.threads.indices.contains(thread) && profile.threads[thread].isMain
      if isMain { activeProfileIndex = profiles.count }
      let start = samples.first?.timestamp ?? 0
      profiles.append(
        FileFormat.Profile(
          type: "sampled",
          name: profile.threads.indices.contains(thread) ? profile.threads[thread].name : "Thread \(thread)",
          unit: "milliseconds", startValue: start, endValue: start + weights.reduce(0, +),
          samples: stacks, weights: weights))
    }

    let file = FileFormat(
      schema: "https://www.speedscope.app/file-format-schema.json",
      shared: .init(frames: frames), profiles: profiles, name: name,
      activeProfileIndex: activeProfileIndex, exporter: "perfharness")
    return file.json()
  }

  /// The subset of the speedscope schema we write; `Decodable` so tests and tools can read
  /// files back.
  public struct FileFormat: Codable, Sendable {
    public var schema: String
    public var shared: Shared
    public var profiles: [Profile]
    public var name: String?
    public var activeProfileIndex: Int?
    public var exporter: String?

    enum CodingKeys: String, CodingKey {
      case schema = "$schema"
      case shared, profiles, name, activeProfileIndex, exporter
    }

    public struct Shared: Codable, Sendable {
      public var frames: [Frame]
    }

    public struct Frame: Codable, Sendable, Hashable {
      public var name: String
      public var file: String?
      public var line: Int?
    }

    /// A `"sampled"` profile: `samples[i]` is a root-first list of indices into
    /// `shared.frames`, standing for `weights[i]` units.
    public struct Profile: Codable, Sendable {
      public var type: String
      public var name: String
      public var unit: String
      public var startValue: Double
      public var endValue: Double
      public var samples: [[Int]]
      public var weights: [Double]
    }
  }

  private struct FunctionKey: Hashable {
    var name: String
    var module: String
  }
}

// Written by hand: JSONEncoder took seconds for 100k samples of 40 frames, this takes a
// fraction of that, and keys come out in the schema's order with `$schema` first.
extension Speedscope.FileFormat {
  func json() -> Data {
    var out: [UInt8] = []
    out.reserveCapacity(64 + profiles.reduce(0) { $0 + $1.samples.count * 128 })
    func raw(_ text: String) { out.append(contentsOf: text.utf8) }
    func string(_ text: String) {
      out.append(UInt8(ascii: "\""))
      for byte in text.utf8 {
        switch byte {
        case UInt8(ascii: "\""): raw("\\\"")
        case UInt8(ascii: "\\"): raw("\\\\")
        case 0x0A: raw("\\n")
        case 0x0D: raw("\\r")
        case 0x09: raw("\\t")
        case 0..<0x20:
          let hex = Array("0123456789abcdef".utf8)
          raw("\\u00")
          out.append(hex[Int(byte >> 4)])
          out.append(hex[Int(byte & 0xF)])
        default: out.append(byte)
        }
      }
      out.append(UInt8(ascii: "\""))
    }
    func number(_ value: Double) {
      // JSON has no NaN or infinity.
      guard value.isFinite else { return raw("0") }
      if value == value.rounded(), abs(value) < 1e15 { raw(String(Int(value))) } else { raw(String(value)) }
    }
    raw("{\"$schema\":")
    string(schema)
    raw(",\"shared\":{\"frames\":[")
    for (index, frame) in shared.frames.enumerated() {
      if index > 0 { raw(",") }
      raw("{\"name\":")
      string(frame.name)
      if let file = frame.file {
        raw(",\"file\":")
        string(file)
      }
      if let line = frame.line { raw(",\"line\":\(line)") }
      raw("}")
    }
    raw("]},\"profiles\":[")
    for (index, profile) in profiles.enumerated() {
      if index > 0 { raw(",") }
      raw("{\"type\":")
      string(profile.type)
      raw(",\"name\":")
      string(profile.name)
      raw(",\"unit\":")
      string(profile.unit)
      raw(",\"startValue\":")
      number(profile.startValue)
      raw(",\"endValue\":")
      number(profile.endValue)
      raw(",\"samples\":[")
      for (sampleIndex, stack) in profile.samples.enumerated() {
        raw(sampleIndex > 0 ? ",[" : "[")
        for (frameIndex, frame) in stack.enumerated() {
          if frameIndex > 0 { out.append(UInt8(ascii: ",")) }
          raw(String(frame))
        }
        raw("]")
      }
      raw("],\"weights\":[")
      for (weightIndex, weight) in profile.weights.enumerated() {
        if weightIndex > 0 { out.append(UInt8(ascii: ",")) }
        number(weight)
      }
      raw("]}")
    }
    raw("]")
    if let name {
      raw(",\"name\":")
      string(name)
    }
    if let activeProfileIndex { raw(",\"activeProfileIndex\":\(activeProfileIndex)") }
    if let exporter {
      raw(",\"exporter\":")
      string(exporter)
    }
    raw("}")
    return Data(out)
  }
}
