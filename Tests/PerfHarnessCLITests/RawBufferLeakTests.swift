import Foundation
import PerfHarness
import Testing

/// Raw heap buffers a program loses, which the leak scan must report whatever the recorder
/// keeps: C built by Debian's cc without frame pointers (gcc keeps data in rbp, which the
/// allocation hooks' stack cache and the Time Profiler's last walks copy) and buffers whose
/// last bytes hold the header of glibc's next chunk (16k + 1 to 16k + 8 bytes). In `record`
/// and in scenario (child process) mode, with each instrument set. `make raw-buffer-leaks`
/// (scripts/raw-buffer-leaks.sh) repeats every configuration 30 times.
@Suite("Raw buffers: every lost block found, whatever the recorder keeps")
struct RawBufferLeakTests {
  let perfharness = try! BuiltBinary("perfharness")
  let swiftProgram = try! BuiltBinary("record-target-swift")

  static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/RawBuffersC/raw_buffers.c")

  /// The C fixture built once per flag set, as a program and as a library (RAW_BUFFERS_LIBRARY).
  struct CBuild: Sendable, CustomTestStringConvertible {
    var flags: [String]
    var program: URL
    var library: URL
    var built = false
    var testDescription: String { "cc \(flags.joined(separator: " "))" }
  }

  static let cBuilds: [CBuild] = {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("raw-buffers-\(getpid())")
    try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    return [["-O2"], ["-O2", "-fomit-frame-pointer"]].enumerated().map { index, flags in
      var build = CBuild(
        flags: flags, program: folder.appendingPathComponent("raw-buffers-\(index)"),
        library: folder.appendingPathComponent("libraw-buffers-\(index).so"))
      build.built =
        compile(flags, to: build.program)
        && compile(flags + ["-DRAW_BUFFERS_LIBRARY", "-fPIC", "-shared"], to: build.library)
      return build
    }
  }()

  /// Debian's cc (gcc, a test package of `make test`), as a user builds a C program.
  static func compile(_ flags: [String], to output: URL) -> Bool {
    buildsC(fixture, flags: flags, to: output, compiler: "cc")
  }

  /// The instrument sets a user picks: the default (time, allocations, leaks) and without the
  /// Time Profiler, each with and without allocation stacks.
  static let instrumentSets: [[String]] = [
    [], ["--no-allocation-stacks"], ["--instruments", "allocations,leaks"],
    ["--instruments", "allocations,leaks", "--no-allocation-stacks"],
  ]

  /// The lost blocks a report names: root leaks of malloc'd blocks (count, bytes).
  static func lostBlocks(_ report: Report) -> (count: Int, bytes: Int) {
    let leaks = report.leaks?.rootLeaks.filter { $0.type.hasPrefix("Malloc ") } ?? []
    return (leaks.reduce(0) { $0 + $1.count }, leaks.reduce(0) { $0 + $1.bytes })
  }

  private func recorded(_ arguments: [String], instruments: [String]) throws -> Report {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run(
      ["record"] + instruments + ["--format", "json", "--output", directory.path, "--"] + arguments)
    #expect(result.status == 0, "\(result.standardError)")
    return try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
  }

  @Test(
    "C from cc -O2, with or without -fomit-frame-pointer: every block, its address kept in rbp or rbx",
    arguments: cBuilds, instrumentSets)
  func cProgramRecorded(build: CBuild, instruments: [String]) throws {
    try #require(build.built, "/usr/bin/cc could not build \(Self.fixture.path) with \(build.flags)")
    // Sizes whose last bytes hold the next chunk's header; the plain loop and the other
    // sizes are make raw-buffer-leaks' (30 runs of each).
    for (shape, size) in [("rbp", 2500), ("rbx", 2488)] {
      let report = try recorded([build.program.path, shape, "11", "\(size)", "2000000"], instruments: instruments)
      let lost = Self.lostBlocks(report)
      #expect(lost.count == 11 && lost.bytes == 11 * size, "\(shape) \(size) B: \(lost.count) of 11 found")
      #expect(report.leaks?.leakedCount == 11, "\(shape) \(size) B")
    }
  }

  /// The Time Profiler reads the program's writable mappings when it starts (a Swift task's
  /// async contexts are read only inside them); the heap's end then is a page boundary that
  /// one of the blocks made afterwards covers, once they grow the heap past it. Its table
  /// read as a root kept that block reachable: 2,999 of 3,000 found, with or without async
  /// stacks, in every run.
  @Test(
    "C's blocks grow the heap past its end when the Time Profiler started: every block",
    arguments: [[], ["--no-async-stacks"]])
  func heapGrownPastTheMappingsRead(instruments: [String]) throws {
    let build = Self.cBuilds[0]
    try #require(build.built, "/usr/bin/cc could not build \(Self.fixture.path) with \(build.flags)")
    let report = try recorded([build.program.path, "plain", "3000", "2496", "2000000"], instruments: instruments)
    let lost = Self.lostBlocks(report)
    #expect(lost.count == 3000 && lost.bytes == 3000 * 2496, "\(lost.count) of 3000 found")
  }

  @Test(
    "Swift's UnsafeMutableRawPointer.allocate: every buffer, its last bytes the next chunk's header",
    arguments: instrumentSets)
  func swiftProgramRecorded(instruments: [String]) throws {
    let report = try recorded(
      [swiftProgram.url.path, "--seconds", "0.05", "--raw-buffers", "11", "2500"], instruments: instruments)
    let lost = Self.lostBlocks(report)
    #expect(lost.count == 11 && lost.bytes == 11 * 2500, "\(lost.count) of 11 found")
  }

  /// The scenario `raw-buffers` of perfharness-leak-corpus (the debug build): the blocks are
  /// lost on the scenario's thread, in the harness's own child process.
  @Test(
    "Scenario mode: Swift's and cc's raw buffers, every block",
    arguments: [
      ["time,allocations,leaks"], ["allocations,leaks"], ["time,allocations,leaks", "--no-allocation-stacks"],
    ]
  )
  func scenarioMode(instruments: [String]) throws {
    let corpus = BuiltBinary(url: try LeakCorpusReleaseTests.corpusBinary("debug"))
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    var runs: [(String, [String: String], Int)] = [("Swift", ["RAW_BUFFERS_SIZE": "2500"], 2500)]
    for (build, shape) in zip(Self.cBuilds, ["rbp", "rbx"]) {
      try #require(build.built, "/usr/bin/cc could not build \(Self.fixture.path) with \(build.flags)")
      runs.append(
        (
          "\(build.testDescription) \(shape)",
          ["RAW_BUFFERS_LIBRARY": build.library.path, "RAW_BUFFERS_SHAPE": shape, "RAW_BUFFERS_SIZE": "2504"], 2504
        ))
    }
    for (name, environment, size) in runs {
      let result = try corpus.run(
        ["scenario", "raw-buffers", "--instruments"] + instruments + [
          "--format", "json", "--output", directory.path,
        ], environment: environment)
      #expect(result.status == 0, "\(result.standardError)")
      let report = try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
      let lost = Self.lostBlocks(report)
      #expect(lost.count == 11 && lost.bytes == 11 * size, "\(name): \(lost.count) of 11 found")
      #expect(report.leaks?.leakedCount == 11, "\(name)")
    }
  }
}
