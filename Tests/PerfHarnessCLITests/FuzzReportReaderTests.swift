import Foundation
import PerfHarness
import PerfReports
import PropertyBased
import Testing

@testable import PerfHarnessCLI

/// Fuzzes what `perfharness report FILE.json` does with a file someone hands it: structured
/// mutations of a real report (keys removed, wrong types, huge numbers, deep nesting, indices
/// off the end, wrong schemaVersion) and byte-level damage (truncation, invalid UTF-8). Every
/// input must either render or fail with a HarnessError naming the file; a trap crashes the
/// test process, which fails the run.
///
/// `PERFHARNESS_FUZZ_COUNT` sets the number of inputs (CI runs the bounded default).
@Suite("Fuzzing the report reader")
struct FuzzReportReaderTests {
  static let count = ProcessInfo.processInfo.environment["PERFHARNESS_FUZZ_COUNT"].flatMap(Int.init) ?? 400

  /// A real report with every instrument's section, read once per test process.
  static let seed: Result<JSONTree, any Error> = Result {
    let fixtures = try BuiltBinary("perfharness-fixtures")
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let run = try fixtures.run([
      "scenario", "completes", "--instruments", "time,allocations,leaks", "--output", directory.path,
    ])
    guard run.status == 0 else {
      throw SeedError(description: "the seed run exited \(run.status): \(run.standardError)")
    }
    var report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: directory.appendingPathComponent("completes/starter/report.json")))
    // The fixture runs too briefly for many samples: give the reader a profile with real
    // shapes (two threads, shared frames, system frames, recursion) to get wrong.
    report.timeProfile?.profile = sampleProfile
    return try JSONTree.parse(ReportJSON.encode(report))
  }

  struct SeedError: Error, CustomStringConvertible { var description: String }

  static let sampleProfile = Profile(
    frames: [
      ProfileFrame(name: "main", module: "App", isApp: true, file: "main.swift", line: 1),
      ProfileFrame(name: "search(for:)", module: "App", isApp: true, file: "Search.swift", line: 10),
      ProfileFrame(name: "memcpy", module: "libc.so.6", isApp: false),
      ProfileFrame(name: "start_thread", module: "libc.so.6", isApp: false),
      ProfileFrame(name: "decode", module: "App", isApp: true),
    ],
    threads: [
      ProfileThread(name: "Main Thread", isMain: true, threadID: 100),
      ProfileThread(name: "Worker", isMain: false, threadID: 101),
    ],
    samples: [
      ProfileSample(thread: 0, weight: 10, stack: [0, 1, 2], timestamp: 0),
      ProfileSample(thread: 0, weight: 3, stack: [0, 1, 1, 1], timestamp: 12),
      ProfileSample(thread: 1, weight: 2, stack: [3, 4], timestamp: 1),
      ProfileSample(thread: 1, weight: 0.25, stack: [3, 2], timestamp: 3),
    ])

  @Test("the unmutated seed reads and renders")
  func seedReads() throws {
    let seed = try Self.seed.get()
    let report = try Self.readAndRender(Data(seed.serialized.utf8))
    #expect(report?.timeProfile?.profile.samples.count == 4)
    #expect(report?.allocations != nil && report?.leaks != nil)
  }

  @Test("structured mutations of a real report render or fail with a clear error")
  func structuredMutations() async throws {
    let seed = try Self.seed.get()
    await propertyCheck(
      count: Self.count, input: Gen<UInt64>.value().array(of: 1...4), Gen<UInt64>.value()
    ) { treeMutations, byteMutation in
      var tree = seed
      for word in treeMutations { tree = JSONMutator.mutate(tree, word: word) }
      let data = JSONMutator.damage(Data(tree.serialized.utf8), word: byteMutation)
      _ = try Self.readAndRender(data)
    }
  }

  @Test("random bytes and random JSON-ish text fail with a clear error")
  func randomBytes() async {
    let alphabet = Array(#"{}[]:,"0123456789.eE+-truefalsnl\ schemaVersion"#.utf8) + [0xFF, 0xC0, 0x80, 0xED]
    await propertyCheck(
      count: Self.count, input: Gen<UInt8>.value(in: 0...UInt8(alphabet.count - 1)).array(of: 0...300)
    ) { picks in
      let data = Data(#"{"schemaVersion":1,"#.utf8 + picks.map { alphabet[Int($0)] })
      _ = try Self.readAndRender(data)
    }
  }

  /// Values that decode into a Report but that the call tree, the exports or the summary
  /// cannot take (an index off a table traps; so does converting 1e300 to Int): the reader
  /// must refuse each, naming where it is.
  static let hostileValues: [String: (path: String, replacement: String, named: String)] = [
    "sample thread past the thread table": (
      #"["timeProfile","profile","samples",0,"thread"]"#, "7", "samples.0.thread"
    ),
    "negative sample thread": (#"["timeProfile","profile","samples",0,"thread"]"#, "-1", "samples.0.thread"),
    "stack index past the frame table": (#"["timeProfile","profile","samples",0,"stack",1]"#, "99", "stack.1"),
    "negative stack index": (#"["timeProfile","profile","samples",0,"stack",0]"#, "-3", "stack.0"),
    "huge sample weight": (#"["timeProfile","profile","samples",0,"weight"]"#, "1e300", "samples.0.weight"),
    "negative sample weight": (#"["timeProfile","profile","samples",0,"weight"]"#, "-5", "samples.0.weight"),
    "zero sample interval": (#"["timeProfile","profile","sampleIntervalMilliseconds"]"#, "0", "sampleInterval"),
    "huge check limit": (#"["checks"]"#, #"[{"name":"x","limit":1e300,"actual":-1e300,"passed":false}]"#, "checks.0"),
    "huge wall time": (#"["wallTimeMilliseconds"]"#, "1e300", "wallTimeMilliseconds"),
    "Int.max bytes": (#"["allocations","totals","peakLiveBytes"]"#, "9223372036854775807", "peakLiveBytes"),
    "Int.min bytes": (#"["allocations","totals","peakLiveBytes"]"#, "-9223372036854775808", "peakLiveBytes"),
    "huge thread weight": (#"["timeProfile","threads",0,"weightMilliseconds"]"#, "1.7e308", "weightMilliseconds"),
    "deep nesting": (
      #"["tool"]"#, String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000), "not JSON"
    ),
  ]

  @Test("values the renderers cannot take are refused, naming where they are", arguments: hostileValues.keys.sorted())
  func hostile(name: String) throws {
    let (path, replacement, named) = try #require(Self.hostileValues[name])
    let seed = try Self.seed.get()
    let mutated = try #require(
      seed.replacing(at: try JSONTree.parse(Data(path.utf8)).pathComponents, with: .raw(replacement)),
      "no node at \(path)")
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("hostile-\(UUID().uuidString).json")
    try Data(mutated.serialized.utf8).write(to: file)
    defer { try? FileManager.default.removeItem(at: file) }
    do {
      _ = try StoredReport.read(file.path)
      Issue.record("\(name): accepted")
    } catch let error as HarnessError {
      #expect(error.description.contains(file.path), "\(error)")
      #expect(error.description.contains(named), "\(error.description.prefix(500))")
    }
  }

  /// Reads `data` as the `report` command does, then renders everything the command renders.
  /// - Returns: the report, or nil when the reader refused it with an error naming the file.
  static func readAndRender(_ data: Data) throws -> Report? {
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("fuzz-\(UUID().uuidString).json")
    try data.write(to: file)
    defer { try? FileManager.default.removeItem(at: file) }
    let report: Report
    do {
      report = try StoredReport.read(file.path)
    } catch let error as HarnessError {
      #expect(error.description.contains(file.path), "\(error)")
      return nil
    }
    _ = RunSummaryText.render(report, reportPath: file.path)
    if let allocations = report.allocations {
      _ = AllocationsText.render(allocations, categoryLimit: 50, filter: "a")
      _ = AllocationsText.render(allocations)
    }
    if let timeProfile = report.timeProfile {
      _ = TimeProfileText.render(timeProfile)
      for options in ["hide-system-libraries", "invert,separate-by-thread", "flatten-recursion,top-functions", "none"] {
        let callTreeOptions = try CallTreeOptions(parsing: options)
        let tree = CallTree(profile: timeProfile.profile, options: callTreeOptions)
        _ = CallTreeText.render(tree, maxDepth: 14, minPercent: 1)
        _ = FoldedStacks.render(timeProfile.profile, options: callTreeOptions)
      }
      _ = try Speedscope.render(timeProfile.profile, name: report.scenario.name)
    }
    return report
  }
}

/// A JSON document kept as text where it matters: numbers and strings stay exactly as
/// written, so mutations can write values no Swift type holds (1e400, lone surrogates).
indirect enum JSONTree: Equatable, Sendable {
  case object([Member])
  case array([JSONTree])
  /// A literal as it appears in the text: `"a\"b"`, `12`, `true`, `null`, or any raw text.
  case raw(String)

  struct Member: Equatable, Sendable {
    var key: String
    var value: JSONTree
  }

  enum PathComponent: Equatable, Sendable {
    case key(String)
    case index(Int)
  }

  struct ParseError: Error {}

  static func parse(_ data: Data) throws -> JSONTree {
    var parser = Parser(bytes: Array(data))
    let tree = try parser.value()
    parser.skipSpace()
    guard parser.position == parser.bytes.count else { throw ParseError() }
    return tree
  }

  /// A path written as a JSON array of keys and indices: `["a", 0, "b"]`.
  var pathComponents: [PathComponent] {
    guard case .array(let items) = self else { return [] }
    return items.compactMap { item in
      guard case .raw(let text) = item else { return nil }
      if text.hasPrefix("\"") { return .key(String(text.dropFirst().dropLast())) }
      return Int(text).map { .index($0) }
    }
  }

  var serialized: String {
    var out = ""
    write(to: &out)
    return out
  }

  private func write(to out: inout String) {
    switch self {
    case .raw(let text): out += text
    case .array(let items):
      out += "["
      for (index, item) in items.enumerated() {
        if index > 0 { out += "," }
        item.write(to: &out)
      }
      out += "]"
    case .object(let members):
      out += "{"
      for (index, member) in members.enumerated() {
        if index > 0 { out += "," }
        out += member.key
        out += ":"
        member.value.write(to: &out)
      }
      out += "}"
    }
  }

  /// Every node with its path, in document order (the root's path is empty).
  var allNodes: [(path: [PathComponent], node: JSONTree)] {
    var nodes: [(path: [PathComponent], node: JSONTree)] = []
    func visit(_ node: JSONTree, _ path: [PathComponent]) {
      nodes.append((path, node))
      switch node {
      case .raw: break
      case .array(let items): for (index, item) in items.enumerated() { visit(item, path + [.index(index)]) }
      case .object(let members):
        for member in members { visit(member.value, path + [.key(String(member.key.dropFirst().dropLast()))]) }
      }
    }
    visit(self, [])
    return nodes
  }

  func node(at path: [PathComponent]) -> JSONTree? {
    guard let first = path.first else { return self }
    switch (self, first) {
    case (.array(let items), .index(let index)) where items.indices.contains(index):
      return items[index].node(at: Array(path.dropFirst()))
    case (.object(let members), .key(let key)):
      return members.first { $0.key == "\"\(key)\"" }?.value.node(at: Array(path.dropFirst()))
    default: return nil
    }
  }

  /// This tree with the node at `path` replaced (or removed, when `replacement` is nil).
  /// - Returns: nil when there is no node at `path`.
  func replacing(at path: [PathComponent], with replacement: JSONTree?) -> JSONTree? {
    guard let first = path.first else { return replacement ?? .raw("null") }
    let rest = Array(path.dropFirst())
    switch (self, first) {
    case (.array(var items), .index(let index)) where items.indices.contains(index):
      if rest.isEmpty, replacement == nil {
        items.remove(at: index)
      } else {
        guard let child = items[index].replacing(at: rest, with: replacement) else { return nil }
        items[index] = child
      }
      return .array(items)
    case (.object(var members), .key(let key)):
      guard let index = members.firstIndex(where: { $0.key == "\"\(key)\"" }) else { return nil }
      if rest.isEmpty, replacement == nil {
        members.remove(at: index)
      } else {
        guard let child = members[index].value.replacing(at: rest, with: replacement) else { return nil }
        members[index].value = child
      }
      return .object(members)
    default: return nil
    }
  }

  var isNumber: Bool {
    guard case .raw(let text) = self, let first = text.first else { return false }
    return first == "-" || first.isNumber
  }

  var isString: Bool {
    guard case .raw(let text) = self else { return false }
    return text.hasPrefix("\"")
  }

  /// Parses valid JSON only (the seed comes from JSONEncoder); literals stay raw.
  private struct Parser {
    let bytes: [UInt8]
    var position = 0

    mutating func skipSpace() {
      while position < bytes.count, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[position]) { position += 1 }
    }

    mutating func value() throws -> JSONTree {
      skipSpace()
      guard position < bytes.count else { throw ParseError() }
      switch bytes[position] {
      case UInt8(ascii: "{"):
        position += 1
        var members: [Member] = []
        skipSpace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
          position += 1
          return .object(members)
        }
        while true {
          skipSpace()
          let key = try string()
          skipSpace()
          try expect(":")
          members.append(Member(key: key, value: try value()))
          skipSpace()
          if try next() == UInt8(ascii: "}") { return .object(members) }
        }
      case UInt8(ascii: "["):
        position += 1
        var items: [JSONTree] = []
        skipSpace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
          position += 1
          return .array(items)
        }
        while true {
          items.append(try value())
          skipSpace()
          if try next() == UInt8(ascii: "]") { return .array(items) }
        }
      case UInt8(ascii: "\""):
        return .raw(try string())
      default:
        let start = position
        while position < bytes.count, !",]} \n\r\t".utf8.contains(bytes[position]) { position += 1 }
        guard position > start else { throw ParseError() }
        return .raw(String(decoding: bytes[start..<position], as: UTF8.self))
      }
    }

    /// A string literal with its quotes and escapes, as written.
    mutating func string() throws -> String {
      let start = position
      try expect("\"")
      while position < bytes.count, bytes[position] != UInt8(ascii: "\"") {
        position += bytes[position] == UInt8(ascii: "\\") ? 2 : 1
      }
      try expect("\"")
      return String(decoding: bytes[start..<position], as: UTF8.self)
    }

    mutating func expect(_ character: Unicode.Scalar) throws {
      guard position < bytes.count, bytes[position] == UInt8(ascii: character) else { throw ParseError() }
      position += 1
    }

    /// The separator after a member or item: `,` or the closing bracket.
    mutating func next() throws -> UInt8 {
      guard position < bytes.count else { throw ParseError() }
      defer { position += 1 }
      return bytes[position]
    }
  }
}

/// Structured mutations, each chosen by one random word (so shrinking a failing case shrinks
/// the words, and a printed seed replays it).
enum JSONMutator {
  static let wrongTypes = [#""text""#, "1", "true", "null", "[]", "{}", "-1", #""""#, "0.5", #"{"a":[]}"#]
  static let extremeNumbers = [
    "9223372036854775807", "-9223372036854775808", "9223372036854775808", "18446744073709551616", "1e308", "-1e308",
    "1e400", "-1", "0", "-0", "0.5", "4294967296", "2147483648", "1.7976931348623157e308", "5e-324", "1e-400",
    "123456789012345678901234567890",
  ]
  static let versions = ["0", "2", "-1", #""1""#, "1.5", "null", "99999999999999999999", "1.0", "true", "[1]"]
  static let strings = [
    #""\ud800""#, #""\u0000""#, #""""#, #""\udc00\ud800""#, "\"" + String(repeating: "é", count: 50_000) + "\"",
    #""\\\"""#, #""%s%n""#,
  ]
  static let nestingDepths = [2, 64, 513, 5_000, 100_000]

  static func mutate(_ tree: JSONTree, word: UInt64) -> JSONTree {
    let all = tree.allNodes
    let paths = all.map(\.path)
    let pick = Int(truncatingIfNeeded: (word >> 8) & 0xFFFF_FFFF)
    let parameter = Int(truncatingIfNeeded: word >> 40)
    func choose(_ candidates: [[JSONTree.PathComponent]]) -> [JSONTree.PathComponent]? {
      candidates.isEmpty ? nil : candidates[pick % candidates.count]
    }
    func nodes(where predicate: (JSONTree) -> Bool) -> [[JSONTree.PathComponent]] {
      all.filter { predicate($0.node) }.map(\.path)
    }
    let anyPath = paths[pick % paths.count]
    switch word % 12 {
    case 0:  // a key or an item removed
      return anyPath.isEmpty ? tree : tree.replacing(at: anyPath, with: nil) ?? tree
    case 1:  // a value of the wrong type
      return tree.replacing(at: anyPath, with: .raw(wrongTypes[parameter % wrongTypes.count])) ?? tree
    case 2:  // a number no field expects
      guard let path = choose(nodes { $0.isNumber }) else { return tree }
      return tree.replacing(at: path, with: .raw(extremeNumbers[parameter % extremeNumbers.count])) ?? tree
    case 3:  // deep nesting around a value
      let depth = nestingDepths[parameter % nestingDepths.count]
      let node = all[pick % all.count].node
      let wrapped =
        parameter & 0x100 == 0
        ? String(repeating: "[", count: depth) + node.serialized + String(repeating: "]", count: depth)
        : String(repeating: #"{"a":"#, count: depth) + node.serialized + String(repeating: "}", count: depth)
      return tree.replacing(at: anyPath, with: .raw(wrapped)) ?? tree
    case 4:  // another schemaVersion
      return tree.replacing(at: [.key("schemaVersion")], with: .raw(versions[parameter % versions.count])) ?? tree
    case 5:  // an array grown by copies of its items
      guard let path = choose(nodes { if case .array(let items) = $0 { !items.isEmpty } else { false } }),
        case .array(let items) = tree.node(at: path)
      else { return tree }
      let copies = (0..<(1 + parameter % 64)).map { items[$0 % items.count] }
      return tree.replacing(at: path, with: .array(items + copies)) ?? tree
    case 6:  // a container emptied
      guard let path = choose(nodes { if case .raw = $0 { false } else { true } }) else { return tree }
      let empty: JSONTree = if case .array = tree.node(at: path) { .array([]) } else { .object([]) }
      return tree.replacing(at: path, with: empty) ?? tree
    case 7:  // a value replaced by another part of the document
      return tree.replacing(at: anyPath, with: all[parameter % all.count].node) ?? tree
    case 8:  // strings JSON allows but text handling may not expect
      guard let path = choose(nodes { $0.isString }) else { return tree }
      return tree.replacing(at: path, with: .raw(strings[parameter % strings.count])) ?? tree
    case 9:  // an index or count off by a little or a lot
      guard let path = choose(nodes { $0.isNumber }), case .raw(let text) = tree.node(at: path),
        let value = Double(text)
      else { return tree }
      let nudged = [value + 1, value - 1, value * 1_000_000, -value, value + 0.5, value * 1e300][parameter % 6]
      let literal = nudged == nudged.rounded() && abs(nudged) < 1e15 ? String(Int(nudged)) : String(nudged)
      return tree.replacing(at: path, with: .raw(literal)) ?? tree
    case 10:  // a key repeated with another value
      guard let path = choose(nodes { if case .object(let members) = $0 { !members.isEmpty } else { false } }),
        case .object(let members) = tree.node(at: path)
      else { return tree }
      let repeated = JSONTree.Member(
        key: members[parameter % members.count].key, value: .raw(wrongTypes[parameter % wrongTypes.count]))
      return tree.replacing(at: path, with: .object(members + [repeated])) ?? tree
    default:  // a key no schema version has
      guard let path = choose(nodes { if case .object = $0 { true } else { false } }),
        case .object(let members) = tree.node(at: path)
      else { return tree }
      return tree.replacing(at: path, with: .object(members + [.init(key: #""zzz""#, value: .raw("{}"))])) ?? tree
    }
  }

  /// Byte-level damage to the serialized document; most words leave it whole so that the
  /// structured mutations reach the decoder.
  static func damage(_ data: Data, word: UInt64) -> Data {
    guard !data.isEmpty else { return data }
    var bytes = [UInt8](data)
    let position = Int(truncatingIfNeeded: (word >> 8) & 0xFFFF_FFFF) % bytes.count
    let parameter = Int(truncatingIfNeeded: word >> 40)
    switch word % 10 {
    case 0:  // truncated, as by a full disk or a killed writer
      bytes.removeSubrange(position...)
    case 1:  // invalid UTF-8: a stray continuation byte, an overlong NUL, a surrogate, 0xFF
      let invalid: [[UInt8]] = [[0x80], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xFF], [0xF4, 0x90, 0x80, 0x80]]
      bytes.insert(contentsOf: invalid[parameter % invalid.count], at: position)
    case 2:  // one byte changed
      bytes[position] = UInt8(truncatingIfNeeded: parameter)
    case 3:  // a slice cut out
      bytes.removeSubrange(position..<min(bytes.count, position + 1 + parameter % 200))
    default:
      break
    }
    return Data(bytes)
  }
}
