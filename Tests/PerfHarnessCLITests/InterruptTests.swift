import Foundation
import PerfHarness
import Testing

@testable import PerfHarnessCLI

/// The harness fails closed: whatever ends it or the scenario, no scenario process, no
/// process the scenario started and no temporary file is left behind.
@Suite("Interrupts, timeouts and leftovers")
struct InterruptTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  /// A sleep length no other test uses: the fixture's two sleeping processes are found by
  /// their command lines, `/bin/sleep S` and `/bin/sleep S1`.
  private static func uniqueSleepSeconds() -> String {
    "119.\(UInt32.random(in: 100_000...999_999))"
  }

  private static func sleepers(_ seconds: String) throws -> [Int32] {
    try BuiltBinary.processIDs(commandLine: "/bin/sleep \(seconds)")
      + BuiltBinary.processIDs(commandLine: "/bin/sleep \(seconds)1")
  }

  /// Everything in `directory` whose name starts with a dot, at any depth, but the
  /// manifest of what a run wrote, which stays.
  private static func hiddenFiles(under directory: URL) -> [String] {
    let walker = FileManager.default.enumerator(atPath: directory.path)
    var found: [String] = []
    while let path = walker?.nextObject() as? String {
      let hidden = path.split(separator: "/").contains { $0.hasPrefix(".") }
      if hidden && !path.hasSuffix(ReportFolder.manifestName) { found.append(path) }
    }
    return found
  }

  /// The scenario processes (`--child-result`) writing under `directory`.
  private static func scenarioChildren(writingUnder directory: URL) throws -> [Int32] {
    try FileManager.default.contentsOfDirectory(atPath: "/proc").compactMap { entry in
      guard let pid = Int32(entry), let raw = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else {
        return nil
      }
      let text = String(decoding: raw, as: UTF8.self)
      return text.contains("--child-result") && text.contains(directory.path) ? pid : nil
    }
  }

  @Test(
    "SIGINT or SIGTERM to the harness reaches the scenario: an interrupted report with what was recorded, exit 128+N, nothing left behind",
    arguments: [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")])
  func interrupt(signal: Int32, name: String) throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let seconds = Self.uniqueSleepSeconds()
    let running = try fixtures.start(
      ["scenario", "hang-with-a-process", "completes", "--format", "json", "--output", directory.path],
      environment: ["FIXTURE_SLEEP_SECONDS": seconds])
    #expect(running.waitForStandardError(containing: "hanging now"), "\(running.standardErrorSoFar)")
    #expect(try Self.sleepers(seconds).count == 2)
    kill(running.pid, signal)
    let result = try running.wait()
    let leftovers = try Self.sleepers(seconds)
    for pid in leftovers { kill(pid, SIGKILL) }

    #expect(result.status == 128 + signal, "\(result.standardError.suffix(2000))")
    #expect(leftovers.isEmpty)
    #expect(try Self.scenarioChildren(writingUnder: directory).isEmpty)
    #expect(Self.hiddenFiles(under: directory).isEmpty)
    let file = directory.appendingPathComponent("hang-with-a-process/starter/report.json")
    let report = try JSONDecoder().decode(Report.self, from: Data(contentsOf: file))
    #expect(report.status == .interrupted)
    #expect(report.error?.contains("received \(name)") == true, "\(report.error ?? "")")
    // The child ended of the signal itself, not of the SIGKILL that follows a grace.
    #expect(report.error?.contains("SIGKILL") == false, "\(report.error ?? "")")
    #expect(report.crash == nil)
    #expect(report.steps.map(\.name) == ["burn", "allocate"])
    #expect((report.timeProfile?.sampleCount ?? 0) > 0)
    let survivors = report.allocations?.categories.first { $0.name.hasSuffix(".SurvivingFixtureObject") }
    #expect(survivors?.persistentCount == 250)
    let printed = try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
    #expect(printed.status == .interrupted)
    // The scenarios after the interrupted one do not run.
    #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("completes").path))
  }

  @Test("a harness killed with SIGKILL takes the scenario process with it (parent-death signal)")
  func harnessKilled() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let seconds = Self.uniqueSleepSeconds()
    let running = try fixtures.start(
      ["scenario", "hang-with-a-process", "--output", directory.path], environment: ["FIXTURE_SLEEP_SECONDS": seconds])
    defer { for pid in (try? Self.sleepers(seconds)) ?? [] { kill(pid, SIGKILL) } }
    #expect(running.waitForStandardError(containing: "hanging now"), "\(running.standardErrorSoFar)")
    let children = try Self.scenarioChildren(writingUnder: directory)
    #expect(children.count == 1)
    kill(running.pid, SIGKILL)
    _ = try? running.wait()
    // The kernel delivers the signal as the harness exits; give a loaded machine a minute.
    var alive = children
    for _ in 0..<600 where !alive.isEmpty {
      alive = alive.filter { pid in
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
        // A zombie (Z) has ended and waits for init to reap it.
        return !(stat.split(separator: ")").last?.trimmingCharacters(in: .whitespaces).hasPrefix("Z") ?? false)
      }
      if !alive.isEmpty { usleep(100_000) }
    }
    #expect(alive.isEmpty, "the scenario process \(alive) still runs after its harness was killed")
  }

  @Test("a timeout ends the processes the scenario started too, in its process group or their own")
  func timeoutEndsTheScenariosProcesses() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let seconds = Self.uniqueSleepSeconds()
    let result = try fixtures.run(
      ["scenario", "hang-with-a-process", "--timeout", "2", "--output", directory.path],
      environment: ["FIXTURE_SLEEP_SECONDS": seconds])
    let leftovers = try Self.sleepers(seconds)
    for pid in leftovers { kill(pid, SIGKILL) }
    #expect(result.status == 3)
    #expect(leftovers.isEmpty)
    #expect(Self.hiddenFiles(under: directory).isEmpty)
    let file = directory.appendingPathComponent("hang-with-a-process/starter/report.json")
    let report = try JSONDecoder().decode(Report.self, from: Data(contentsOf: file))
    #expect(report.crash?.timedOut == true)
  }

  @Test("a TMPDIR that cannot be written changes nothing: the child's result goes beside the reports")
  func unwritableTemporaryDirectory() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    // A regular file: nothing can be created under it, not even by root.
    let notADirectory = directory.appendingPathComponent("tmpdir-is-a-file")
    try Data("x".utf8).write(to: notADirectory)
    let output = directory.appendingPathComponent("out")
    let result = try fixtures.run(
      ["scenario", "completes", "--output", output.path], environment: ["TMPDIR": notADirectory.path])
    #expect(result.status == 0, "\(result.standardError)")
    let report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: output.appendingPathComponent("completes/starter/report.json")))
    #expect(report.status == .passed)
    #expect(report.steps.map(\.name) == ["work"])
    #expect(Self.hiddenFiles(under: output).isEmpty)
  }
}
