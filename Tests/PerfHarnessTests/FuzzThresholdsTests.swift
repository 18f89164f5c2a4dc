import Foundation
import PropertyBased
import Testing

@testable import PerfHarness

/// Fuzzes the thresholds file parser and the size parser (thresholds files and the
/// --max-growth/--max-leaked-bytes flags): any text must give thresholds or an error that
/// names the file, never a trap; every well-formed file reads back what it says.
///
/// `PERFHARNESS_FUZZ_COUNT` sets the number of inputs (CI runs the bounded default).
@Suite("Fuzzing the thresholds parser")
struct FuzzThresholdsTests {
  static let count = ProcessInfo.processInfo.environment["PERFHARNESS_FUZZ_COUNT"].flatMap(Int.init) ?? 400

  static let units: [(String, Double)] = [
    ("B", 1), ("KB", 1e3), ("MB", 1e6), ("GB", 1e9), ("KiB", 1024), ("MiB", 1_048_576), ("GiB", 1_073_741_824),
  ]

  /// Pieces that thresholds files and sizes are made of, and the ways they go wrong.
  static let fragments = [
    "max-growth-per-generation", "warm-up-generations", "max-leaked-bytes", "max-cycles", "max-persistent",
    "max-peak-heap", ":", ": ", "\n", "\n  ", "  ", "- ", "#", "0", "1", "64", "-1", "1.5", ".", "e3",
    "9223372036854775807", "9223372036854775808", "99999999999999999999999", "1e308", "0x10", "KB", "KiB", "MiB", "GiB",
    "B", " B", "App.Screen", "closure context", "[", "]", "{", "}", ",", "\"", "'", "&a", "*a", "!!int", "!!binary",
    "|", ">", "---", "...", "~", "null", "true", "\t", "%YAML 1.2", "? ", "<<: ", "é", "\u{0}", "\u{FEFF}", "\u{1F600}",
    String(repeating: "9", count: 400), String(repeating: "[", count: 2000), String(repeating: "{a: ", count: 300),
    String(repeating: "- ", count: 300),
  ]

  @Test("any text from thresholds-file pieces parses or fails naming the file")
  func fragmentsNeverCrash() async {
    await propertyCheck(
      count: Self.count, input: Gen<Int>.int(in: 0...(Self.fragments.count - 1)).array(of: 0...40)
    ) { picks in
      Self.parseOrFail(picks.map { Self.fragments[$0] }.joined())
    }
  }

  @Test("arbitrary Unicode text parses or fails naming the file")
  func arbitraryText() async {
    // Code points, surrogates replaced (they are not scalars).
    let scalar = Gen<UInt32>.value(in: 0...0x10_FFFF).map { Unicode.Scalar($0) ?? "\u{FFFD}" }
    await propertyCheck(count: Self.count, input: scalar.array(of: 0...200)) { scalars in
      var text = ""
      text.unicodeScalars.append(contentsOf: scalars)
      Self.parseOrFail(text)
    }
  }

  @Test("sizes: random text is refused or parsed to a non-negative byte count")
  func sizeText() async {
    let pieces = [
      "0", "1", "9", ".", " ", "-", "+", "e", "B", "KB", "KiB", "MB", "MiB", "GB", "GiB", "\u{663}", "½", "\t",
    ]
    await propertyCheck(count: Self.count, input: Gen<Int>.int(in: 0...(pieces.count - 1)).array(of: 0...30)) {
      picks in
      let text = picks.map { pieces[$0] }.joined()
      if let size = ByteSize(parsing: text) {
        #expect(size.bytes >= 0, "\(text)")
        _ = size.description
      }
    }
  }

  @Test("sizes: a number and a unit read back as number × unit, or are refused past Int.max")
  func sizeArithmetic() async {
    await propertyCheck(
      count: Self.count, input: Gen<UInt64>.value(), Gen<Int>.int(in: 0...(Self.units.count - 1)),
      Gen<Int>.int(in: 0...3)
    ) { number, unitIndex, scale in
      let (unit, factor) = Self.units[unitIndex]
      // Whole numbers up to 2^64, and decimals made from them.
      let value = scale == 0 ? Double(number) : Double(number % 100_000) / 1000
      let text = scale == 0 ? "\(number)\(scale % 2 == 0 ? "" : " ")\(unit)" : "\(value) \(unit)"
      let parsed = ByteSize(parsing: text)
      let expected = value * factor
      if expected < 9.2e18 {
        let bytes = try #require(parsed, "\(text)")
        #expect(abs(Double(bytes.bytes) - expected) <= max(1, expected * 1e-12), "\(text)")
      } else if expected >= 9.3e18 {
        #expect(parsed == nil, "\(text)")
      }
      // As a limit, only up to what a report holds; past it, refused as too large.
      let largest = Double(Limit.largestValue)
      if expected <= largest * 0.999 {
        #expect(Limit.maxPeakHeap.parse(text) != nil, "\(text)")
      } else if expected >= largest * 1.001 {
        #expect(Limit.maxPeakHeap.parse(text) == nil, "\(text)")
        #expect(Limit.maxPeakHeap.rejection(of: text).contains("is too large; accepted: a size from 0 to"), "\(text)")
      }
    }
  }

  @Test("descriptions of any byte count do not trap")
  func sizeDescriptions() async {
    await propertyCheck(count: Self.count, input: Gen<Int>.int()) { bytes in
      #expect(!ByteSize(bytes: bytes).description.isEmpty)
    }
  }

  @Test("well-formed files read back every limit they set")
  func roundTrip() async {
    let type = Gen<Character>.letterOrNumber.string(of: 1...12)
    await propertyCheck(
      count: Self.count,
      input: Gen<Int>.int(in: 0...Limit.largestValue).array(of: 5), type.array(of: 0...4),
      Gen<Int>.int(in: 0...(Self.units.count - 1)).array(of: 3)
    ) { numbers, types, units in
      // Up to 900,000 GiB: within the largest limit a report holds, in every unit.
      let sizes = (0..<3).map { "\(numbers[$0] % 900_000) \(Self.units[units[$0]].0)" }
      var text = """
        max-growth-per-generation: \(sizes[0])
        max-leaked-bytes: \(sizes[1])
        max-peak-heap: \(sizes[2])
        warm-up-generations: \(numbers[3])
        max-cycles: \(numbers[4])

        """
      if !types.isEmpty {
        text += "max-persistent:\n" + types.enumerated().map { "  T\($1): \($0)\n" }.joined()
      }
      let thresholds = try Thresholds.parse(text, path: "round-trip.yaml")
      #expect(thresholds.maxGrowthPerGeneration == ByteSize(parsing: sizes[0]))
      #expect(thresholds.maxLeakedBytes == ByteSize(parsing: sizes[1]))
      #expect(thresholds.maxPeakHeap == ByteSize(parsing: sizes[2]))
      #expect(thresholds.warmUpGenerations == numbers[3])
      #expect(thresholds.maxCycles == numbers[4])
      // Duplicate type names keep the last count, as YAML readers do.
      var expected: [String: Int] = [:]
      for (index, name) in types.enumerated() { expected["T\(name)"] = index }
      #expect(thresholds.maxPersistent == expected)
    }
  }

  /// Inputs a parser is likely to get wrong: each is read or refused with a short error
  /// naming the file.
  static let hostileInputs: [String: String] = [
    "100000 open brackets": String(repeating: "[", count: 100_000),
    "20000 nested mappings": String(repeating: "{a: ", count: 20_000),
    "20000 nested sequences": String(repeating: "- ", count: 20_000) + "x",
    "a 400-digit size": "max-growth-per-generation: " + String(repeating: "9", count: 400) + " B",
    "a count past Int.max": "max-cycles: 99999999999999999999999",
    "a sequence as a type name": "max-persistent:\n  ? [a, b]\n  : 1\n",
    "a recursive alias": "a: &x [*x]\n",
    "an alias to a mapping as a count": "max-persistent: &a\n  T: 1\nmax-cycles: *a\n",
    "a 100000-character line of bad YAML": "max-cycles: [" + String(repeating: "x", count: 100_000) + "\n",
    "duplicate keys": "max-cycles: 0\nmax-cycles: 1\n",
  ]

  @Test("hostile inputs are read or refused with a short error", arguments: hostileInputs.keys.sorted())
  func hostile(name: String) throws {
    let text = try #require(Self.hostileInputs[name])
    Self.parseOrFail(text)
    do {
      _ = try Thresholds.parse(text, path: "hostile.yaml")
    } catch let error as ThresholdsFileError {
      // A clear error: short enough to read, whatever the input's size.
      #expect(error.description.count < 600, "\(error.description.prefix(600))")
    }
  }

  static func parseOrFail(_ text: String) {
    do {
      _ = try Thresholds.parse(text, path: "fuzz.yaml")
    } catch let error as ThresholdsFileError {
      #expect(error.description.hasPrefix("fuzz.yaml"), "\(error)")
    } catch {
      Issue.record("not a ThresholdsFileError: \(error)")
    }
  }
}
