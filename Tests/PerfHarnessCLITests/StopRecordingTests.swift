import Foundation
import PerfHarness
import Testing

@testable import PerfHarnessCLI

/// `stopRecording()` pauses every instrument: set-up work is not measured, and what the
/// recording counted before is still followed.
@Suite("stopRecording pauses every instrument")
struct StopRecordingTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  @Test(
    "nothing allocated or run while stopped is measured; a counted object freed while stopped is not persistent",
    arguments: [
      "time,allocations", "time,allocations,leaks", "allocations", "allocations,leaks",
    ])
  func paused(instruments: String) throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let arguments = ["scenario", "pauses", "--instruments", instruments, "--output", directory.path]
    let result = try fixtures.run(arguments + (instruments.contains("leaks") ? [] : ["--no-allocation-stacks"]))
    #expect(result.status == 0, "\(result.standardError)")
    let report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: directory.appendingPathComponent("pauses/starter/report.json")))
    let categories = report.allocations?.categories ?? []
    let recorded = categories.first { $0.name.hasSuffix(".RecordedFixtureObject") }
    #expect(recorded?.persistentCount == 40, "\(instruments)")
    #expect(recorded?.totalCount == 100, "\(instruments)")
    let setUp = categories.filter { $0.name.contains("SetUpFixtureObject") }
    #expect(setUp.isEmpty, "\(instruments): \(setUp.map { "\($0.name) \($0.totalCount)" })")
    if instruments.contains("leaks") {
      #expect(report.leaks?.leakedCount == 0, "\(instruments) \(report.leaks?.rootLeaks.map(\.type) ?? [])")
    }
    if let profile = report.timeProfile?.profile {
      let names = Set(profile.frames.map(\.name))
      #expect(!names.contains { $0.contains("burnWhileStopped") }, "\(instruments)")
      #expect(names.contains { $0.contains("burnCPU") }, "\(instruments)")
    }
  }

  @Test(
    "realloc keeps every usable byte of the old block, under each instrument set",
    arguments: ["allocations,leaks", "time,allocations,leaks", "allocations"])
  func reallocKeepsTheUsableBytes(instruments: String) throws {
    // A program may use every byte malloc_usable_size gives (Swift sizes its buffers so),
    // and glibc's realloc keeps them. With the leaks instrument new bytes are zeroed, from
    // what was taken to be the old block's end: its request, so bytes 20-23 of a block of
    // 20 (24 usable) were lost.
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try fixtures.run([
      "scenario", "realloc-usable-bytes", "--instruments", instruments, "--output", directory.path,
    ])
    #expect(result.status == 0, "\(instruments): \(result.standardError)")
  }
}
