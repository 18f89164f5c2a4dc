import Foundation
import PerfHarness
import Testing

#if canImport(Glibc)
  import Glibc
#endif

/// Both instruments at the highest sample rate on Tests/Fixtures/Stress: sixteen allocating
/// threads, threads created and exiting throughout, a thread that blocks SIGPROF, and forks.
/// The stress runs in child processes (the fixture, and the scenario process it starts), so a
/// deadlock ends in a kill and a failed test, never a hung CI.
@Suite("The recorder under stress")
struct RecorderStressTests {
  static let iterations = 10
  /// Far above a normal run (a few seconds) on a loaded 2-core machine.
  static let deadline: Duration = .seconds(240)

  // The shape of Tests/Fixtures/Stress/main.swift (StressShape), per iteration.
  static let workers = 16
  static let rounds = 1_000
  static let droppedPerRound = 4
  static let keptEveryRounds = 8
  static let ephemeralThreads = 50
  static let objectsPerEphemeralThread = 10
  static let blocked = 1_000
  static let blockedKeptEvery = 4

  struct Run {
    var status: Int32
    var timedOut: Bool
    var standardError: String
    var report: Report?
  }

  /// Runs the fixture with a watchdog: past `deadline` it is killed and the test fails.
  static func runStress(clock: String) throws -> Run {
    let binary = try BuiltBinary("perfharness-stress")
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let process = Process()
    process.executableURL = binary.url
    process.arguments = [
      "scenario", "recorder-stress", "--instruments", "time,allocations", "--sample-rate", "10000", "--clock", clock,
      "--iterations", String(iterations), "--timeout", "200", "--output", directory.path,
    ]
    let errors = FileManager.default.temporaryDirectory.appendingPathComponent("stress-\(UUID().uuidString).err")
    _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
    defer { try? FileManager.default.removeItem(at: errors) }
    process.standardError = try FileHandle(forWritingTo: errors)
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    let end = ContinuousClock.now + deadline
    var timedOut = false
    while process.isRunning {
      if ContinuousClock.now > end {
        timedOut = true
        // The harness's own scenario child dies with it: it is in the same process group
        // only if we make it so, so kill the harness's children first.
        killChildren(of: process.processIdentifier)
        kill(process.processIdentifier, SIGKILL)
        break
      }
      usleep(20_000)
    }
    process.waitUntilExit()
    let reportFile = directory.appendingPathComponent("recorder-stress/starter/report.json")
    let report = (try? Data(contentsOf: reportFile)).flatMap { try? JSONDecoder().decode(Report.self, from: $0) }
    let standardError = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
    return Run(status: process.terminationStatus, timedOut: timedOut, standardError: standardError, report: report)
  }

  static func killChildren(of pid: Int32) {
    guard let children = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else {
      return
    }
    for child in children.split(separator: " ").compactMap({ Int32($0) }) { kill(child, SIGKILL) }
  }

  @Test(
    "exact counts, no deadlock, lost samples reported, at 10 kHz with allocation stacks",
    arguments: ["cpu", "wall"])
  func stress(clock: String) throws {
    let run = try Self.runStress(clock: clock)
    #expect(
      !run.timedOut, "the stress run did not finish in \(Self.deadline): deadlock?\n\(run.standardError.suffix(3000))")
    #expect(run.status == 0, "\(run.standardError.suffix(3000))")
    let report = try #require(run.report, "no report: \(run.standardError.suffix(3000))")
    #expect(report.status == .passed, "\(report.error ?? "")")

    let allocations = try #require(report.allocations)
    func category(_ type: String) -> AllocationsReport.Category? {
      allocations.categories.first { $0.name.hasSuffix(".\(type)") }
    }
    let n = Self.iterations
    let kept = try #require(category("StressProbeKept"))
    #expect(kept.persistentCount == Self.workers * Self.rounds * n / Self.keptEveryRounds)
    #expect(kept.transientCount == 0)
    let dropped = try #require(category("StressProbeDropped"))
    #expect(dropped.persistentCount == 0)
    #expect(dropped.transientCount == Self.workers * Self.rounds * n * Self.droppedPerRound)
    let ephemeral = try #require(category("StressProbeEphemeral"))
    #expect(ephemeral.persistentCount == 0)
    #expect(ephemeral.transientCount == Self.ephemeralThreads * n * Self.objectsPerEphemeralThread)
    let blocked = try #require(category("StressProbeBlocked"))
    #expect(blocked.persistentCount == Self.blocked * n / Self.blockedKeptEvery)
    #expect(blocked.transientCount == Self.blocked * n - Self.blocked * n / Self.blockedKeptEvery)
    // The forked children allocated their own probes; none of them reaches the parent's counts.
    #expect(category("StressProbeForkChild") == nil)
    #expect(allocations.lost.blocks == 0 && allocations.lost.stacks == 0, "\(allocations.lost)")

    let time = try #require(report.timeProfile)
    #expect(time.sampleRateHz == 10_000)
    #expect(time.clock == clock)
    // Every signal the handler took is a sample or a counted loss: nothing silently dropped.
    #expect(time.lostSamples >= 0)
    #expect(time.signalsReceived == time.sampleCount + time.lostSamples, "\(time.signalsReceived) signals")
    #expect(time.sampleCount > 0)
    // Its signals stay pending: the thread that blocks SIGPROF is never sampled.
    let blockedThread = time.threads.first { $0.name == "sigprof-blocked" }
    #expect((blockedThread?.sampleCount ?? 0) == 0, "\(blockedThread.map { "\($0.sampleCount)" } ?? "")")
    // The workers, the spawner and some of the short-lived threads were sampled.
    #expect(time.threads.count >= Self.workers, "\(time.threads.count) threads")
  }
}
