import Testing

@testable import PerfHarness

@Suite("Thresholds files and sizes")
struct ThresholdsTests {
  @Test(
    "sizes in the accepted forms",
    arguments: [
      ("0", 0), ("512 B", 512), ("512B", 512), ("64KB", 64_000), ("64 KiB", 65_536), ("1.5 MiB", 1_572_864),
      ("2MB", 2_000_000), ("1 GiB", 1_073_741_824),
    ])
  func sizes(text: String, bytes: Int) {
    #expect(ByteSize(parsing: text)?.bytes == bytes)
  }

  @Test(
    "malformed sizes are refused", arguments: ["", "12", "KB", "-1KB", "1e3KB", "12XB", "1.2.3MB", "64 kb", "nan MB"])
  func badSizes(text: String) {
    #expect(ByteSize(parsing: text) == nil)
  }

  @Test("a full file")
  func fullFile() throws {
    let thresholds = try Thresholds.parse(
      """
      # comment
      max-growth-per-generation: 64 KB
      warm-up-generations: 2
      max-leaked-bytes: 0
      max-cycles: 0
      max-persistent:
        App.Screen: 1
        closure context: 0
      max-peak-heap: 10 MiB
      """, path: "t.yaml")
    #expect(thresholds.maxGrowthPerGeneration?.bytes == 64_000)
    #expect(thresholds.warmUpGenerations == 2)
    #expect(thresholds.maxLeakedBytes?.bytes == 0)
    #expect(thresholds.maxCycles == 0)
    #expect(thresholds.maxPersistent == ["App.Screen": 1, "closure context": 0])
    #expect(thresholds.maxPeakHeap?.bytes == 10 * 1024 * 1024)
    #expect(thresholds.requiredInstruments == [.allocations, .leaks])
  }

  @Test(
    "malformed files name the line and the field",
    arguments: [
      ("max-growth-per-generation: lots\n", 1, "max-growth-per-generation"),
      ("max-cycles: 0\nmax-cycles2: 1\n", 2, "unknown key"),
      ("max-persistent: 3\n", 1, "max-persistent"),
      ("max-persistent:\n  App.Screen: many\n", 2, "max-persistent"),
      ("warm-up-generations: -1\n", 1, "warm-up-generations"),
      ("- a list\n", 1, "expected a mapping"),
    ])
  func badFiles(text: String, line: Int, mentions: String) {
    do {
      _ = try Thresholds.parse(text, path: "bad.yaml")
      Issue.record("accepted \(text)")
    } catch let error as ThresholdsFileError {
      #expect(error.line == line, "\(error)")
      #expect(error.description.hasPrefix("bad.yaml:\(line):"))
      #expect(error.description.contains(mentions), "\(error)")
    } catch {
      Issue.record("unexpected \(error)")
    }
  }

  @Test("YAML that does not parse is refused with the file named")
  func notYAML() {
    #expect(throws: ThresholdsFileError.self) { try Thresholds.parse("a: [1, 2\n", path: "x.yaml") }
  }

  @Test("flags override the file, key by key")
  func overrides() {
    var file = Thresholds()
    file.maxGrowthPerGeneration = ByteSize(bytes: 1)
    file.maxPersistent = ["A": 1, "B": 2]
    var flags = Thresholds()
    flags.maxPersistent = ["B": 5]
    flags.maxCycles = 0
    let merged = file.overridden(by: flags)
    #expect(merged.maxGrowthPerGeneration?.bytes == 1)
    #expect(merged.maxPersistent == ["A": 1, "B": 5])
    #expect(merged.maxCycles == 0)
  }
}
