import Foundation
import PerfHarness

/// The Time Profiler's samples as a gzipped pprof profile (`profile.proto`), which
/// `go tool pprof`, Pyroscope, Parca and Polar Signals read: sample types `samples/count`
/// and `cpu/nanoseconds`, a function per demangled name with its file, a location per
/// machine frame with its lines, and each sample's thread as the labels `thread` and
/// `thread_id`.
///
/// Functions the compiler inlined (``ProfileFrame/isInlined``) are lines of their caller's
/// location, innermost first and the caller last, as pprof models inlining: `go tool pprof`
/// then shows them as inlined calls, not as calls of their own.
public enum Pprof {
  public static func cpuProfile(_ profile: Profile) -> Data {
    var strings = StringTable()
    var message = ProtobufWriter()
    let samplesType = valueType(strings.index("samples"), strings.index("count"))
    let cpuType = valueType(strings.index("cpu"), strings.index("nanoseconds"))
    message.bytes(field: 1, samplesType)
    message.bytes(field: 1, cpuType)

    let threadKey = strings.index("thread")
    let threadIDKey = strings.index("thread_id")
    // A location per machine frame: a run of inlined frames and the frame they were inlined
    // into, leaf first. Ids start at 1 (0 means none), in order of first use.
    var locationIDs: [[Int]: UInt64] = [:]
    var locationFrames: [[Int]] = []
    func locations(of stack: [Int]) -> [UInt64] {
      var result: [UInt64] = []
      var group: [Int] = []
      for frame in stack.reversed() {
        group.append(frame)
        let inlined = profile.frames.indices.contains(frame) && profile.frames[frame].isInlined == true
        if inlined { continue }
        result.append(locationID(group))
        group = []
      }
      if !group.isEmpty { result.append(locationID(group)) }
      return result
    }
    func locationID(_ group: [Int]) -> UInt64 {
      if let known = locationIDs[group] { return known }
      locationFrames.append(group)
      let id = UInt64(locationFrames.count)
      locationIDs[group] = id
      return id
    }
    for sample in profile.samples {
      var encoded = ProtobufWriter()
      encoded.packed(field: 1, locations(of: sample.stack))
      encoded.packed(
        field: 2, [UInt64(sample.sampleCount), UInt64(bitPattern: Int64((sample.weight * 1e6).rounded()))])
      if profile.threads.indices.contains(sample.thread) {
        let thread = profile.threads[sample.thread]
        var name = ProtobufWriter()
        name.varint(field: 1, UInt64(threadKey))
        name.varint(field: 2, UInt64(strings.index(thread.name)))
        encoded.bytes(field: 3, name.data)
        var id = ProtobufWriter()
        id.varint(field: 1, UInt64(threadIDKey))
        id.varint(field: 3, UInt64(bitPattern: Int64(thread.threadID)))
        encoded.bytes(field: 3, id.data)
      }
      message.bytes(field: 2, encoded.data)
    }

    // One function per (name, module, file); a location's lines are its frames.
    var functions = FunctionTable()
    for (index, group) in locationFrames.enumerated() {
      var location = ProtobufWriter()
      location.varint(field: 1, UInt64(index + 1))
      for frameIndex in group where profile.frames.indices.contains(frameIndex) {
        let frame = profile.frames[frameIndex]
        let functionID = functions.id(name: frame.name, module: frame.module, file: frame.file, strings: &strings)
        var line = ProtobufWriter()
        line.varint(field: 1, functionID)
        if let number = frame.line { line.varint(field: 2, UInt64(number)) }
        location.bytes(field: 4, line.data)
      }
      message.bytes(field: 4, location.data)
    }
    message.append(functions.encoded)

    let intervalNanoseconds = UInt64((profile.sampleIntervalMilliseconds * 1e6).rounded())
    for string in strings.strings { message.bytes(field: 6, Data(string.utf8)) }
    message.varint(field: 10, UInt64((profile.totalWeight() * 1e6).rounded()))
    message.bytes(field: 11, cpuType)
    message.varint(field: 12, intervalNanoseconds)
    message.varint(field: 14, UInt64(strings.index("cpu")))
    return Gzip.stored(message.data)
  }

  /// The heap profile by allocation stack: `alloc_objects/count` and `alloc_space/bytes`
  /// (everything allocated while recording, `totalStacks`) and `inuse_objects/count` and
  /// `inuse_space/bytes` (what was still live at the end, `persistentStacks`), pprof's four
  /// heap types in Go's order; reports written before `totalStacks` give the `inuse_*`
  /// pair only. Nil when recorded without stacks.
  public static func heapProfile(_ allocations: AllocationsReport) -> Data? {
    guard let persistent = allocations.persistentStacks else { return nil }
    let totals = allocations.totalStacks
    var strings = StringTable()
    var message = ProtobufWriter()
    let names = (totals != nil ? ["alloc_objects", "alloc_space"] : []) + ["inuse_objects", "inuse_space"]
    var spaceType = Data()
    for name in names {
      let type = valueType(strings.index(name), strings.index(name.hasSuffix("objects") ? "count" : "bytes"))
      message.bytes(field: 1, type)
      if name == "inuse_space" { spaceType = type }
    }
    // One sample per stack: its totals and what of it was live, in `names`' order.
    var order: [[Int]] = []
    var values: [[Int]: [Int]] = [:]
    var categories: [[Int]: String] = [:]
    func add(_ frames: [Int], at offset: Int, count: Int, bytes: Int) {
      if values[frames] == nil {
        order.append(frames)
        values[frames] = Array(repeating: 0, count: names.count)
      }
      values[frames]![offset] += count
      values[frames]![offset + 1] += bytes
    }
    for stack in totals ?? [] { add(stack.frames, at: 0, count: stack.count, bytes: stack.bytes) }
    for stack in persistent {
      add(stack.frames, at: names.count - 2, count: stack.count, bytes: stack.bytes)
      categories[stack.frames] = categories[stack.frames] ?? stack.category
    }
    var locationIDs: [String: UInt64] = [:]
    var locations = ProtobufWriter()
    var functions = FunctionTable()
    let categoryKey = strings.index("object")
    for frames in order {
      var ids: [UInt64] = []
      for frame in allocations.frames(at: frames) {
        let functionID = functions.id(name: frame.symbol, module: frame.module, file: frame.file, strings: &strings)
        let locationKey = "\(functionID):\(frame.line ?? 0)"
        if let known = locationIDs[locationKey] {
          ids.append(known)
          continue
        }
        let locationID = UInt64(locationIDs.count + 1)
        locationIDs[locationKey] = locationID
        var line = ProtobufWriter()
        line.varint(field: 1, functionID)
        if let number = frame.line { line.varint(field: 2, UInt64(number)) }
        var location = ProtobufWriter()
        location.varint(field: 1, locationID)
        location.bytes(field: 4, line.data)
        locations.bytes(field: 4, location.data)
        ids.append(locationID)
      }
      var sample = ProtobufWriter()
      sample.packed(field: 1, ids)  // leaf first, as the stack is
      sample.packed(field: 2, values[frames]!.map { UInt64($0) })
      if let category = categories[frames] {
        var label = ProtobufWriter()
        label.varint(field: 1, UInt64(categoryKey))
        label.varint(field: 2, UInt64(strings.index(category)))
        sample.bytes(field: 3, label.data)
      }
      message.bytes(field: 2, sample.data)
    }
    message.append(locations)
    message.append(functions.encoded)
    for string in strings.strings { message.bytes(field: 6, Data(string.utf8)) }
    message.bytes(field: 11, spaceType)
    message.varint(field: 14, UInt64(strings.index("inuse_space")))
    return Gzip.stored(message.data)
  }

  private static func valueType(_ type: Int, _ unit: Int) -> Data {
    var value = ProtobufWriter()
    value.varint(field: 1, UInt64(type))
    value.varint(field: 2, UInt64(unit))
    return value.data
  }
}

/// pprof's functions, one per name, module and file, encoded as they are first met.
private struct FunctionTable {
  private var ids: [String: UInt64] = [:]
  private(set) var encoded = ProtobufWriter()

  mutating func id(name: String, module: String, file: String?, strings: inout StringTable) -> UInt64 {
    let key = "\(name)\u{0}\(module)\u{0}\(file ?? "")"
    if let known = ids[key] { return known }
    let id = UInt64(ids.count + 1)
    ids[key] = id
    var function = ProtobufWriter()
    function.varint(field: 1, id)
    function.varint(field: 2, UInt64(strings.index(name)))
    function.varint(field: 3, UInt64(strings.index(name)))
    function.varint(field: 4, UInt64(strings.index(file ?? module)))
    encoded.bytes(field: 5, function.data)
    return id
  }
}

/// pprof's string table: index 0 is the empty string.
private struct StringTable {
  private(set) var strings = [""]
  private var indices = ["": 0]

  mutating func index(_ string: String) -> Int {
    if let known = indices[string] { return known }
    strings.append(string)
    indices[string] = strings.count - 1
    return strings.count - 1
  }
}

/// The protobuf wire format, for the one message pprof reads: varints and length-delimited
/// fields (submessages, strings and packed repeated integers).
struct ProtobufWriter {
  private(set) var data = Data()

  mutating func varint(field: Int, _ value: UInt64) {
    rawVarint(UInt64(field << 3))
    rawVarint(value)
  }

  mutating func bytes(field: Int, _ bytes: Data) {
    rawVarint(UInt64(field << 3 | 2))
    rawVarint(UInt64(bytes.count))
    data.append(bytes)
  }

  mutating func packed(field: Int, _ values: [UInt64]) {
    var payload = ProtobufWriter()
    for value in values { payload.rawVarint(value) }
    bytes(field: field, payload.data)
  }

  mutating func append(_ other: ProtobufWriter) { data.append(other.data) }

  private mutating func rawVarint(_ value: UInt64) {
    var rest = value
    while rest >= 0x80 {
      data.append(UInt8(rest & 0x7F) | 0x80)
      rest >>= 7
    }
    data.append(UInt8(rest))
  }
}

/// A gzip member (RFC 1952) holding deflate's stored blocks (RFC 1951, BTYPE 00): readable by
/// every gzip reader without a compression library. pprof files are small beside the report.
enum Gzip {
  static func stored(_ payload: Data) -> Data {
    var out = Data([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF])
    var offset = 0
    repeat {
      let length = min(65535, payload.count - offset)
      let isFinal = offset + length == payload.count
      out.append(isFinal ? 1 : 0)
      out.append(contentsOf: [UInt8(length & 0xFF), UInt8(length >> 8)])
      out.append(contentsOf: [UInt8(~length & 0xFF), UInt8((~length >> 8) & 0xFF)])
      out.append(payload[payload.startIndex + offset..<payload.startIndex + offset + length])
      offset += length
    } while offset < payload.count
    let crc = crc32(payload)
    let size = UInt32(truncatingIfNeeded: payload.count)
    for value in [crc, size] {
      out.append(contentsOf: (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) })
    }
    return out
  }

  private static let table: [UInt32] = (0..<256).map { index in
    var value = UInt32(index)
    for _ in 0..<8 { value = value & 1 != 0 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
    return value
  }

  static func crc32(_ data: Data) -> UInt32 {
    var crc: UInt32 = 0xFFFF_FFFF
    for byte in data { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
    return ~crc
  }
}
