import Foundation
import PropertyBased
import Testing

@testable import PerfHarness

/// The compiled matcher answers as the plain scan of every pattern with
/// `LeakSuppressions.glob` did, whatever the patterns' shapes.
@Suite("Leak suppressions matcher")
struct LeakSuppressionsMatcherTests {
  static let count = ProcessInfo.processInfo.environment["PERFHARNESS_FUZZ_COUNT"].flatMap(Int.init) ?? 400

  /// What names and globs are made of: literal text (with a shared stem, so prefixes and
  /// suffixes overlap), wildcards, and scalars whose UTF-8 or canonical equivalence would
  /// trip a matcher comparing Strings or bytes carelessly.
  static let pieces = [
    "App", ".", "Type", "Cache", "Image", "a", "b", "ab", "*", "*", "?", "é", "e\u{301}", "\u{301}", "\u{1F600}", "<",
    "swift::", "",
  ]

  /// The matcher before it was compiled: every pattern tried in turn.
  static func reference(_ patterns: [LeakSuppressions.Pattern], type: String, stack: [AllocationsReport.StackFrame])
    -> Bool
  {
    patterns.contains { pattern in
      switch pattern.kind {
      case .type: LeakSuppressions.glob(pattern.glob, matches: type)
      case .stack:
        stack.contains {
          LeakSuppressions.glob(pattern.glob, matches: $0.symbol)
            || LeakSuppressions.glob(pattern.glob, matches: $0.module)
        }
      }
    }
  }

  static func text(_ picks: [Int]) -> String { picks.map { pieces[$0] }.joined() }

  @Test("random patterns and names: the matcher's answer is the scan's")
  func sameAsScan() async {
    let piece = Gen<Int>.int(in: 0...(Self.pieces.count - 1))
    let glob = piece.array(of: 0...5)
    await propertyCheck(
      count: Self.count, input: glob.array(of: 0...12), Gen<Bool>.bool.array(of: 12), piece.array(of: 0...8),
      piece.array(of: 0...6).array(of: 0...4)
    ) { globs, kinds, type, frames in
      let patterns = globs.enumerated().map { index, picks in
        LeakSuppressions.Pattern(kind: kinds[index] ? .type : .stack, glob: Self.text(picks), line: index + 1)
      }
      let typeName = Self.text(type)
      let stack = frames.map { AllocationsReport.StackFrame(symbol: Self.text($0), module: "lib", isApp: false) }
      let matcher = LeakSuppressions(patterns: patterns).matcher()
      #expect(
        matcher.matches(type: typeName, stack: stack) == Self.reference(patterns, type: typeName, stack: stack),
        "\(patterns.map(\.glob)) against \(typeName) \(stack.map(\.symbol))")
    }
  }

  /// One name against one glob of each shape at a time, over a fixed table: each shape's
  /// index (exact, prefix, suffix, the rest) on its own.
  @Test(
    "a table of globs: each shape matches as glob(_:matches:)",
    arguments: [
      "App.Type", "App.*", "*.Type", "*Type*", "App.?ype", "*", "**", "App**", "**Type", "A*e", "", "?", "é*",
      "*e\u{301}", "*\u{301}", "App.Type*", "App.TypeX", "a*b*", "\u{1F600}*",
    ])
  func table(glob: String) {
    let names = [
      "App.Type", "App.Types", "App.", "App", "Other.Type", "App.Hype", "", "é", "e\u{301}", "ée\u{301}", "ab",
      "\u{1F600}App", "\u{1F600}", "App.TypeX", "Ape",
    ]
    let matcher = LeakSuppressions(patterns: [.init(kind: .type, glob: glob, line: 1)]).matcher()
    for name in names {
      #expect(
        matcher.matches(type: name, stack: []) == LeakSuppressions.glob(glob, matches: name), "\(glob) against \(name)")
    }
  }

  /// The scale that took 220 s scanning (timed in docs/measurements.md): here only the
  /// answers, checked against the scan on a sample of the names.
  @Test("11,485 patterns of every shape against 20,000 leaked types")
  func manyPatterns() {
    var patterns: [LeakSuppressions.Pattern] = []
    for index in 0..<11_485 {
      let glob =
        switch index % 5 {
        case 0: "App.Module\(index).Type"
        case 1: "App.Module\(index).*"
        case 2: "*.Helper\(index)"
        case 3: "App.Mod?le\(index).Cache"
        default: "*Wrapper\(index)<*"
        }
      patterns.append(.init(kind: index % 7 == 6 ? .stack : .type, glob: glob, line: index + 1))
    }
    let types = (0..<20_000).map { index in
      switch index % 6 {
      case 0: "App.Module\(index).Type"
      case 1: "App.Module\(index).Type.Inner"
      case 2: "Lib.Helper\(index)"
      case 3: "App.Module\(index).Cache"
      case 4: "Generic.Wrapper\(index)<Int>"
      default: "Unmatched\(index)"
      }
    }
    let stack = [AllocationsReport.StackFrame(symbol: "App.Module12.Type", module: "App", isApp: true)]
    let matcher = LeakSuppressions(patterns: patterns).matcher()
    let matched = types.map { matcher.matches(type: $0, stack: stack) }
    for index in stride(from: 0, to: types.count, by: 2_999) {
      #expect(matched[index] == Self.reference(patterns, type: types[index], stack: stack), "\(types[index])")
    }
    #expect(matched.contains(true) && matched.contains(false))
  }
}
