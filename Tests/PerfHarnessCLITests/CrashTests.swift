import Foundation
import PerfHarness
import Testing

/// A scenario that crashes or hangs ends its child process, not the harness.
@Suite("Crashing and hanging scenarios")
struct CrashTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  private func run(_ scenario: String, _ extra: [String] = []) throws -> (BuiltBinary.Result, Report) {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try fixtures.run(
      ["scenario", scenario, "--instruments", "time,allocations", "--output", directory.path] + extra)
    let file = directory.appendingPathComponent("\(scenario)/starter/report.json")
    let report = try JSONDecoder().decode(Report.self, from: Data(contentsOf: file))
    return (result, report)
  }

  @Test(
    "a crash exits 3, names the signal and the crashing stack, and still writes the report",
    arguments: [
      ("fatal-error", "SIGILL", "main.swift:20"), ("segfault", "SIGSEGV", "crashWithNullDereference"),
      // The runtime's backtracer cannot unwind out of glibc's abort() (no frame pointers):
      // the stack holds the libc frame only.
      ("abort", "SIGABRT", "pthread_kill"),
    ])
  func crash(scenario: String, signal: String, inStack: String) throws {
    let (result, report) = try run(scenario)
    #expect(result.status == 3)
    #expect(report.status == .crashed)
    #expect(report.crash?.signal == signal, "\(report.error ?? "")")
    #expect(report.error?.contains(signal) == true)
    #expect(result.standardOutput.contains("crashed"))
    let stack = report.crash?.stack ?? []
    #expect(stack.contains { $0.contains(inStack) }, "\(stack.prefix(8))")
  }

  @Test("a hang past --timeout is killed: exit 3 with timedOut")
  func hang() throws {
    let start = Date()
    let (result, report) = try run("hang", ["--timeout", "2"])
    #expect(result.status == 3)
    #expect(report.crash?.timedOut == true)
    #expect(report.error?.contains("timed out after 2 s") == true)
    #expect(Date().timeIntervalSince(start) < 60)
  }

  @Test("a thrown error is a crash of the scenario, reported by the child")
  func thrown() throws {
    let (result, report) = try run("throws")
    #expect(result.status == 3)
    #expect(report.error?.contains("failed on purpose") == true)
    #expect(report.crash == nil)
  }

  @Test("after a crash the remaining scenarios still run")
  func continues() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try fixtures.run(["scenario", "abort", "completes", "--output", directory.path])
    #expect(result.status == 3)
    #expect(result.standardOutput.contains("completes [starter, 1 iteration]: passed"))
  }
}
