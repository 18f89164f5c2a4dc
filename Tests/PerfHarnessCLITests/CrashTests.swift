import Foundation
import PerfHarness
import Testing

@testable import PerfHarnessCLI

/// A scenario that crashes or hangs ends its child process, not the harness.
@Suite("Crashing and hanging scenarios")
struct CrashTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  private func run(_ scenario: String, _ extra: [String] = []) throws -> (BuiltBinary.Result, Report) {
    try fixtures.runScenario(scenario, extra)
  }

  /// What every crashing fixture records before it crashes (`recordBeforeTheCrash`).
  private func expectRecordedBeforeTheCrash(_ report: Report, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(report.steps.map(\.name) == ["burn", "allocate"], sourceLocation: sourceLocation)
    #expect(report.marks.map(\.label) == ["before the crash"], sourceLocation: sourceLocation)
    #expect((report.timeProfile?.sampleCount ?? 0) > 0, sourceLocation: sourceLocation)
    let survivors = report.allocations?.categories.first { $0.name.hasSuffix(".SurvivingFixtureObject") }
    #expect(survivors?.persistentCount == 250, "\(report.error ?? "")", sourceLocation: sourceLocation)
    #expect(report.allocations?.generations.first?.label == "before the crash", sourceLocation: sourceLocation)
    #expect(report.error?.contains("recorded until") == true, sourceLocation: sourceLocation)
  }

  @Test(
    "a crash exits 3, names the signal and the crashing stack, and still writes what was recorded",
    arguments: [
      ("fatal-error", "SIGILL", "crashWithFatalError"), ("segfault", "SIGSEGV", "crashWithNullDereference"),
      // The runtime's backtracer cannot unwind out of glibc's abort() (no frame pointers):
      // the stack holds the libc frame only.
      ("abort", "SIGABRT", "pthread_kill"),
    ])
  func crash(scenario: String, signal: String, inStack: String) throws {
    let (result, report) = try run(scenario, ["--format", "json"])
    #expect(result.status == 3)
    #expect(report.status == .crashed)
    #expect(report.crash?.signal == signal, "\(report.error ?? "")")
    #expect(report.crash?.timedOut == false)
    #expect(report.error?.contains("crashed with \(signal)") == true)
    let stack = report.crash?.stack ?? []
    #expect(stack.contains { $0.contains(inStack) }, "\(stack.prefix(8))")
    expectRecordedBeforeTheCrash(report)
    // stdout (JSON Lines) carries the same report as the file.
    let printed = try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
    #expect(printed.crash?.signal == signal)
    expectRecordedBeforeTheCrash(printed)
  }

  @Test("a hang past --timeout is stopped: exit 3 with timedOut, where it hung, and what was recorded")
  func hang() throws {
    let (result, report) = try run("hang", ["--timeout", "2", "--format", "json"])
    #expect(result.status == 3)
    #expect(report.status == .crashed)
    #expect(report.crash?.timedOut == true)
    #expect(report.error?.contains("SIGABRT") == true)
    #expect(report.error?.contains("timed out after 2 s") == true)
    // Not the 20 s grace: the kill follows the backtracer's exit.
    #expect(report.error?.contains("killed (SIGKILL) once its backtrace was written") == true, "\(report.error ?? "")")
    let stack = report.crash?.stack ?? []
    #expect(stack.contains { $0.contains("spinForever") }, "\(stack.prefix(8))")
    expectRecordedBeforeTheCrash(report)
    let printed = try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
    expectRecordedBeforeTheCrash(printed)
  }

  @Test("a thrown error is a crash of the scenario, reported by the child")
  func thrown() throws {
    let (result, report) = try run("throws")
    #expect(result.status == 3)
    #expect(report.error?.contains("failed on purpose") == true)
    #expect(report.crash == nil)
  }

  @Test("a process the scenario leaves behind holding its stderr does not hold up the harness")
  func orphanHoldingStandardError() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try fixtures.run(["scenario", "leaves-a-process", "--output", directory.path])
    // Still alive when the harness ended: the harness did not wait for the pipe to close.
    let orphans = try BuiltBinary.processIDs(commandLine: "/bin/sleep 117.25")
    for pid in orphans { kill(pid, SIGKILL) }
    #expect(result.status == 0, "\(result.standardError)")
    #expect(orphans.count == 1)
    #expect(
      result.standardError.contains("leaves-a-process: a process the scenario started still holds its stderr open"))
  }

  @Test("what the scenario prints on stdout and stderr reaches the harness's stderr, in order, in every run")
  func outputIsKept() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let expected = (1...3).flatMap { ["stdout line \($0)", "stderr line \($0)"] }
    for _ in 0..<8 {
      let result = try fixtures.run(["scenario", "prints", "--instruments", "none", "--output", directory.path])
      #expect(result.status == 0, "\(result.standardError)")
      let lines = result.standardError.split(separator: "\n").map(String.init).filter { $0.contains(" line ") }
      #expect(lines == expected)
      #expect(!result.standardOutput.contains(" line "))
    }
  }

  /// stdout shares the pipe stderr uses, so what the scenario printed before it crashed
  /// reaches the harness's stderr ahead of the crash report, never dropped.
  @Test("what the scenario printed on stdout before a crash is passed on, before the backtrace")
  func stdoutBeforeACrash() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    for _ in 0..<4 {
      let result = try fixtures.run([
        "scenario", "prints-then-aborts", "--instruments", "none", "--output", directory.path,
      ])
      #expect(result.status == 3)
      let printed = try #require(result.standardError.range(of: "stdout before the crash"), "\(result.standardError)")
      let crashed = try #require(result.standardError.range(of: "Program crashed"), "\(result.standardError)")
      #expect(printed.upperBound < crashed.lowerBound)
    }
  }

  @Test("after a crash the remaining scenarios still run")
  func continues() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try fixtures.run(["scenario", "abort", "completes", "--output", directory.path])
    #expect(result.status == 3)
    #expect(result.standardOutput.contains("completes [starter, 1 iteration]: no checks"))
  }
}

@Suite("The scenario's output")
struct ScenarioOutputTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  /// glibc keeps stdout's buffer (4 KiB, allocated at the first print) for the process's
  /// life, named from its own data; memcheck and LeakSanitizer do not report it either.
  @Test("printing while recording is no leak")
  func printingIsNoLeak() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    for _ in 0..<3 {
      let result = try fixtures.run([
        "scenario", "prints", "--instruments", "leaks", "--format", "json", "--output", directory.path,
      ])
      #expect(result.status == 0, "\(result.standardError)")
      let report = try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
      let leaks = try #require(report.leaks)
      #expect(leaks.leakedCount == 0, "\(leaks.rootLeaks.map { "\($0.count) \($0.type)" })")
    }
  }

  @Test("only the tail of a flood is kept in memory; all of it is passed on and the rest is counted")
  func boundedTail() throws {
    let pipe = Pipe()
    let devNull = try #require(FileHandle(forWritingAtPath: "/dev/null"))
    let collector = StandardErrorCollector(pipe.fileHandleForReading, passingTo: devNull)
    let line = Data(String(repeating: "x", count: 1023).appending("\n").utf8)
    let lines = 1024
    for _ in 0..<lines { pipe.fileHandleForWriting.write(line) }
    try pipe.fileHandleForWriting.close()
    let (text, heldOpen, dropped) = collector.finish(within: 5)
    #expect(!heldOpen)
    #expect(text.utf8.count == StandardErrorCollector.tailBytes)
    #expect(dropped == lines * line.count - StandardErrorCollector.tailBytes)
    #expect(text.hasSuffix("x\n"))
  }
}
