import Foundation
import PerfHarness
import Testing

@testable import PerfHarnessCLI

/// A failure of the harness's own code is exit 1 naming the harness, never the
/// scenario's crash (exit 3); a package's badly declared scenarios are refused by name.
@Suite("Blame")
struct BlameTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  /// Runs the fixtures executable from bash after `limit` (a ulimit command).
  private func run(under limit: String, _ arguments: [String]) throws -> BuiltBinary.Result {
    try BuiltBinary(url: URL(fileURLWithPath: "/bin/bash")).run(
      ["-c", "\(limit) && exec \"$0\" \"$@\"", fixtures.url.path] + arguments)
  }

  @Test(
    "scenarios declared with an invalid name or variant are refused before anything runs, each named, exit 1",
    arguments: [["list"], ["scenario", "completes"], ["scenario", "escapes", "--variant", "../../tmp/x"]])
  func invalidDeclarations(arguments: [String]) throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let output = directory.appendingPathComponent("out/reports")
    let result = try fixtures.run(
      arguments + (arguments == ["list"] ? [] : ["--output", output.path]),
      environment: ["FIXTURE_BAD_DECLARATIONS": "1"])
    #expect(result.status == 1, "\(result.standardError)")
    for problem in [
      "variant '../../tmp/x' of scenario 'escapes' is not valid: names use lowercase letters, digits and '-'",
      "scenario name 'Bad Name' is not valid", "scenario name '' is not valid", "two scenarios are named 'completes'",
    ] {
      #expect(result.standardError.contains(problem), "\(result.standardError)")
    }
    // Nothing was written, inside the output folder or beside it.
    #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("out").path))
  }

  @Test("a refused timer_create (no pending signals allowed) is the harness's failure: exit 1, not a crash")
  func timerRefused() throws {
    for mode in [[], ["--in-process"]] {
      let directory = try temporaryDirectory()
      defer { try? FileManager.default.removeItem(at: directory) }
      // Timers, as where the kernel refuses perf events: the pending-signal limit refuses them.
      let result = try run(
        under: "ulimit -i 0; export PERFHARNESS_SAMPLE_SOURCE=timer",
        ["scenario", "completes", "--instruments", "time", "--output", directory.path] + mode)
      #expect(result.status == 1, "\(mode) \(result.standardError)")
      #expect(result.standardError.contains("perfharness failed running completes, not the scenario"), "\(mode)")
      #expect(result.standardError.contains("timer_create"), "\(mode) \(result.standardError)")
      #expect(!result.standardOutput.contains("crashed"))
    }
  }

  /// libdw recurses deeply through the debug info: on a 128 KiB main stack it faults
  /// while the report is symbolized, after the scenario's code has finished.
  @Test("a crash in the harness's symbolizer after the scenario finished is exit 1 naming the harness")
  func symbolizerCrash() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try run(under: "ulimit -s 128", ["scenario", "completes", "--output", directory.path])
    #expect(result.status == 1, "\(result.standardError.suffix(3000))")
    #expect(result.standardError.contains("perfharness failed running completes, not the scenario"))
    #expect(result.standardError.contains("the scenario's code had finished"))
    #expect(result.standardError.contains("SIGSEGV"))
    #expect(!result.standardOutput.contains("crashed"))
  }

  @Test("a write that fails names its file, and the run's figures are still printed: exit 1")
  func fileTooLarge() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    // 40 KiB: the JSON report of a run without instruments fits, its HTML page does not.
    let result = try run(
      under: "ulimit -f 40", ["scenario", "completes", "--instruments", "none", "--output", directory.path])
    #expect(result.status == 1, "\(result.standardError)")
    let folder = directory.appendingPathComponent("completes/starter")
    #expect(result.standardError.contains("cannot write \(folder.path)/report.html"), "\(result.standardError)")
    #expect(result.standardError.contains("File too large"))
    #expect(result.standardOutput.contains("completes [starter, 1 iteration]: no checks"))
    #expect(result.standardOutput.contains("work      1"))
    let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
    #expect(files == [ReportFolder.manifestName, "report.json"])
  }

  /// The child hands its result over through a file; when that write fails, the result
  /// pipe takes it, and the harness still has every figure to print.
  @Test("a result file the child cannot write loses no figure: they are printed, the report's write is named")
  func resultFileTooLarge() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    // 8 KiB: neither the child's result (about 15 KB with allocations) nor report.json fits.
    let result = try run(
      under: "ulimit -f 8", ["scenario", "completes", "--instruments", "allocations", "--output", directory.path])
    #expect(result.status == 1, "\(result.standardError)")
    let folder = directory.appendingPathComponent("completes/starter")
    #expect(result.standardError.contains("cannot write \(folder.path)/report.json"), "\(result.standardError)")
    #expect(!result.standardError.contains("not the scenario"), "\(result.standardError)")
    #expect(result.standardOutput.contains("completes [starter, 1 iteration]: no checks"), "\(result.standardOutput)")
    #expect(result.standardOutput.contains("Allocations:"), "\(result.standardOutput)")
  }
}
