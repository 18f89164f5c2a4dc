import Foundation
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// The harness never changes the behaviour of the code it measures: the app's observable
/// outputs (search results, thumbnails' pixels, cache contents, navigation state, favourites)
/// are the same plain and under every instrument, and unwinding still goes through libgcc_s.
/// Runs Tests/Fixtures/PhotoSearchOutputs, built with the package.
@Suite("Measuring changes nothing")
struct MeasuringChangesNothingTests {
  struct Run {
    var status: Int32
    var standardError: String
    var outputs: String
  }

  static func fixture() throws -> URL {
    var folder = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    while folder.path != "/" {
      folder = folder.deletingLastPathComponent()
      let candidate = folder.appendingPathComponent("photosearch-outputs")
      if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
    }
    throw NotBuilt()
  }

  struct NotBuilt: Error, CustomStringConvertible {
    var description: String { "photosearch-outputs is not built: run `swift build` before `swift test`" }
  }

  static func run(_ arguments: [String]) throws -> Run {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outputs-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let outputs = directory.appendingPathComponent("outputs.txt")
    let process = Process()
    process.executableURL = try fixture()
    process.arguments =
      arguments.first == "plain" ? ["plain", outputs.path] : arguments + ["--output", directory.path]
    process.environment = ProcessInfo.processInfo.environment.merging(["PHOTOSEARCH_OUTPUTS": outputs.path]) { $1 }
    let errors = Pipe()
    process.standardError = errors
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    let errorText = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return Run(
      status: process.terminationStatus, standardError: errorText,
      outputs: (try? String(contentsOf: outputs, encoding: .utf8)) ?? "")
  }

  static let plain = Result { try run(["plain"]) }

  @Test("a plain run produces outputs and unwinds through libgcc_s")
  func plainRun() throws {
    let plain = try Self.plain.get()
    #expect(plain.status == 0, "\(plain.standardError)")
    #expect(plain.outputs.contains("starter search dog:"))
    #expect(plain.outputs.contains("fixed after memory warning: 0 images"))
    #expect(plain.outputs.contains("unwinder: ") && plain.outputs.contains("libgcc_s"), "\(plain.outputs.suffix(200))")
  }

  @Test(
    "the same outputs under every instrument",
    arguments: [
      ["--instruments", "time", "--sample-rate", "10000"],
      ["--instruments", "time", "--sample-rate", "10000", "--clock", "wall"],
      ["--instruments", "allocations"],
      ["--instruments", "allocations", "--no-allocation-stacks"],
      ["--instruments", "leaks"],
      ["--instruments", "time,allocations,leaks", "--sample-rate", "5000", "--memory-warning"],
    ])
  func underInstruments(flags: [String]) throws {
    let plain = try Self.plain.get()
    try #require(plain.status == 0)
    let measured = try Self.run(["scenario", "observable-outputs"] + flags)
    #expect(measured.status == 0, "\(measured.standardError)")
    #expect(!measured.outputs.isEmpty)
    if measured.outputs != plain.outputs {
      let plainLines = plain.outputs.split(separator: "\n", omittingEmptySubsequences: false)
      let measuredLines = measured.outputs.split(separator: "\n", omittingEmptySubsequences: false)
      let first =
        zip(plainLines, measuredLines).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        ?? min(plainLines.count, measuredLines.count)
      Issue.record(
        """
        outputs differ under \(flags) at line \(first + 1):
          plain:    \(first < plainLines.count ? plainLines[first] : "<end>")
          measured: \(first < measuredLines.count ? measuredLines[first] : "<end>")
        """)
    }
  }

  /// This test process links the harness's C targets too: its unwinder is the one every
  /// executable that links them gets.
  @Test("_Unwind_* resolve to libgcc_s in a process that links the harness")
  func unwinderInThisProcess() throws {
    for name in ["_Unwind_RaiseException", "_Unwind_Backtrace", "_Unwind_GetIP", "_Unwind_Resume"] {
      let symbol = try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), name), "\(name) unresolved")
      let library = Self.mappedFile(containing: UInt(bitPattern: symbol)) ?? "?"
      #expect(library.contains("libgcc_s"), "\(name) resolves to \(library)")
    }
  }

  /// The file mapped at `address`, from /proc/self/maps (Glibc's module does not import dladdr).
  static func mappedFile(containing address: UInt) -> String? {
    // /proc files report size 0: read to the end rather than by size.
    guard let handle = FileHandle(forReadingAtPath: "/proc/self/maps") else { return nil }
    let maps = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
    for line in maps.split(separator: "\n") {
      let fields = line.split(separator: " ", omittingEmptySubsequences: true)
      let range = fields.first?.split(separator: "-").compactMap { UInt($0, radix: 16) } ?? []
      if range.count == 2, (range[0]..<range[1]).contains(address), fields.count >= 6 { return String(fields[5]) }
    }
    return nil
  }
}
