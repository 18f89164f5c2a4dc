import CPerfCrash
import Foundation
import PerfHarness
import PerfReports

/// Runs one scenario in a child process (this executable, `scenario NAME --child-result
/// FILE`), so that a crash or a hang ends the child, not the harness: the harness then
/// still writes a report naming the signal and the crashing stack, and exits 3. The
/// child's CrashReporter hands over what was recorded until then; without it (a heap too
/// broken to build a report) the report says so and holds the crash alone.
struct ScenarioProcess {
  var options: ScenarioOptions

  /// - Parameter folder: the run's report folder, which holds the child's result file.
  func run(_ scenario: Scenario, variant: ScenarioVariant, iterations: Int, in folder: ReportFolder) throws -> Report {
    // Beside the report rather than in TMPDIR: a TMPDIR that cannot be written must not
    // turn a finished run into a crash, and the next run into this folder removes what a
    // killed harness left.
    let result = folder.url.appendingPathComponent(".perfharness-child-\(getpid()).json")
    defer { try? FileManager.default.removeItem(at: result) }
    let configuration = folder.url.appendingPathComponent(".perfharness-child-\(getpid()).configuration.json")
    defer { try? FileManager.default.removeItem(at: configuration) }
    try JSONEncoder().encode(options.recordingConfiguration).write(to: configuration)
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    var environment = ProcessInfo.processInfo.environment
    // The child ends with this process (ScenarioCommand.dieWithParent).
    environment[Self.parentEnvironmentKey] = String(getpid())
    if options.recordingConfiguration.instruments.contains(.leaks) {
      // The interposer then tracks every block from the child's start, so the leak scan
      // knows the blocks allocated before the recording (CPerfAlloc_trackAllBlocks).
      environment["PERFHARNESS_TRACK_ALL_BLOCKS"] = "1"
    }
    let start = ContinuousClock.now
    let child = try ChildProcess.spawn(
      executable: executable,
      arguments: childArguments(
        scenario.name, variant: variant, iterations: iterations, configuration: configuration.path, result: result.path),
      environment: environment)
    // Reaped once everything below is done with its pid (the group's id).
    defer {
      var status: Int32 = 0
      waitpid(child.pid, &status, 0)
    }
    let collected = StandardErrorCollector(child.output, passingTo: FileHandle.standardError)
    // In a process group of its own: a Ctrl-C at the terminal reaches only the harness,
    // which passes it on from its signal handler.
    let group = child.pid
    CPerfCrash_setChildGroup(group)
    defer { CPerfCrash_setChildGroup(0) }
    let interruptedBeforeStart = CPerfCrash_interruption()
    if interruptedBeforeStart != 0 { kill(-group, interruptedBeforeStart) }
    let deadline = start + .seconds(options.timeout)
    var timedOut = false
    var interruption: (signal: Int32, at: ContinuousClock.Instant)?
    var killed: Kill?
    var lastStop = deadline
    var backtracer = BacktracerWatch(pid: child.pid)
    var ended: Ending?
    while true {
      ended = Ending.of(child.pid)
      if ended != nil { break }
      let now = ContinuousClock.now
      if interruption == nil, case let signal = CPerfCrash_interruption(), signal != 0 {
        interruption = (signal, now)
      }
      if let interruption {
        // The child reports what it recorded and dies of the signal; one that ignores it
        // or hangs in its report is killed with everything in its group.
        if killed == nil && now > interruption.at + .seconds(Self.stopGraceSeconds) {
          killed = .afterGrace
          kill(-group, SIGKILL)
        }
        usleep(5_000)
        continue
      }
      if killed == nil && now > deadline && now >= lastStop {
        // The stop signal, once: the child writes what it recorded, then the backtracer
        // prints where it hung. It returns from a signal that was sent rather than raised
        // by a fault, so SIGKILL ends the child. Sending it again sooner can kill the child
        // mid-backtrace, and the orphaned backtracer then holds its stderr open for good.
        if !timedOut { backtracer.start() }
        timedOut = true
        lastStop = now + .seconds(Self.stopGraceSeconds * 2)
        _ = CPerfCrash_signalMainThread(child.pid, Self.stopSignal)
      }
      if timedOut && killed == nil {
        // Once the backtracer the stop started has exited, the child is back in the code
        // that hung, with nothing left to write: waiting out the grace gains nothing.
        if backtracer.hasFinished() {
          killed = .afterBacktrace
        } else if now > deadline + .seconds(Self.stopGraceSeconds) {
          killed = .afterGrace
        }
        if killed != nil { kill(-group, SIGKILL) }
      }
      usleep(5_000)
    }
    if timedOut || interruption != nil {
      // Nothing the scenario started outlives a run the harness ended.
      Self.endLeftoverProcesses(group: group)
    }
    guard let ending = ended else { throw HarnessError("lost track of the scenario process \(group)") }
    let milliseconds = (ContinuousClock.now - start).milliseconds
    let (standardError, heldOpen, dropped) = collected.finish(within: Self.standardErrorDrainSeconds)

    if heldOpen {
      FileHandle.standardError.write(
        Data(
          "perfharness: \(scenario.name): a process the scenario started still holds its stderr open; stopped reading it \(Self.standardErrorDrainSeconds) s after the scenario ended\n"
            .utf8))
    }
    // The result file, or what the child handed over on its result pipe when it could not
    // write that file (a full disk, a file size limit): the figures are not lost to it.
    let handedOver = child.result.finish(within: Self.standardErrorDrainSeconds)
    let file = try? BoundedFile.read(result.path, limit: BoundedFile.reportLimit)
    // A write that failed halfway leaves a file that does not decode.
    let childReport = [file, handedOver].lazy.compactMap { $0.flatMap { try? ReportJSON.decode($0) } }.first
    let written = file ?? handedOver
    if ending.signal == nil, ending.status == 0, let childReport {
      return childReport
    }
    let lines = standardError.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let signal = ending.signal.map(Self.signalName)
    if let interruption {
      return Self.interrupted(
        childReport, by: interruption.signal, killed: killed != nil,
        or: Report.crashed(
          scenario: scenario.name, variant: variant.rawValue, iterations: iterations,
          instruments: Instrument.allCases.filter(options.recordingConfiguration.instruments.contains), error: "",
          wallTimeMilliseconds: milliseconds,
          crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: [])))
    }
    if !timedOut {
      try Self.blameTheHarness(
        scenario.name, written: childReport == nil ? written : nil, ending: ending, signal: signal, lines: lines)
    }
    var error: String
    if timedOut {
      error =
        "the scenario timed out after \(options.timeout) s (--timeout)"
        + (killed?.description ?? ": stopped with \(Self.signalName(Self.stopSignal))")
    } else if let signal {
      error = "the scenario crashed with \(signal)" + (Self.fatalMessage(lines).map { ": \($0)" } ?? "")
    } else {
      error = "the scenario process exited with status \(ending.status) without a report"
    }
    let crash = CrashInfo(
      signal: signal, timedOut: timedOut, stack: Self.crashingStack(lines),
      standardErrorTail: Self.tail(lines, dropped: dropped))
    if var partial = childReport {
      // The child's reporter wrote what was recorded until the signal.
      partial.status = .crashed
      partial.error = [error, partial.error].compactMap { $0 }.joined(separator: "; ")
      partial.crash = crash
      return partial
    }
    error += "; the process wrote no partial report: steps, marks and recordings are lost"
    return Report.crashed(
      scenario: scenario.name, variant: variant.rawValue, iterations: iterations,
      instruments: Instrument.allCases.filter(options.recordingConfiguration.instruments.contains), error: error,
      wallTimeMilliseconds: milliseconds, crash: crash)
  }

  /// The last 40 lines, headed by how much output came before the kept tail when the
  /// collector let some go (it keeps StandardErrorCollector.tailBytes).
  static func tail(_ lines: [String], dropped: Int) -> [String] {
    let kept = Array(lines.suffix(40))
    let earlier = dropped + lines.dropLast(kept.count).reduce(0) { $0 + $1.utf8.count + 1 }
    return earlier > 0 && dropped > 0 ? ["[\(earlier) earlier bytes of output not kept]"] + kept : kept
  }

  /// Throws when the child ended in the harness's own code rather than the scenario's: a
  /// harness failure is exit 1 naming the harness, never the scenario's crash.
  private static func blameTheHarness(
    _ scenario: String, written: Data?, ending: Ending, signal: String?, lines: [String]
  ) throws {
    let failure = written.flatMap { try? JSONDecoder().decode(ChildHarnessFailure.self, from: $0) }
    guard failure != nil || (signal == nil && ending.status == childHarnessFailureStatus) else { return }
    var message = "perfharness failed running \(scenario), not the scenario: "
    message +=
      failure?.harnessFailure ?? lines.last { $0.hasPrefix("perfharness: ") }.map { String($0.dropFirst(13)) }
      ?? "no reason given"
    if let signal {
      message += "; its process ended with \(signal)"
      let stack = crashingStack(lines).prefix(3)
      if !stack.isEmpty {
        message += " in " + stack.map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " | ")
      }
    }
    throw HarnessError(message)
  }

  /// The report of a run the person running it stopped: what the child wrote before the
  /// signal ended it, or `empty` (no figures) when it wrote nothing.
  private static func interrupted(_ partial: Report?, by signal: Int32, killed: Bool, or empty: Report) -> Report {
    var report = partial ?? empty
    report.status = .interrupted
    report.crash = nil
    let name = signalName(signal)
    var error = "interrupted: the harness received \(name) and passed it on to the scenario"
    if killed { error += ", which was killed (SIGKILL) \(stopGraceSeconds) s later" }
    error +=
      partial == nil
      ? "; the process wrote no partial report: steps, marks and recordings are lost"
      : "; " + (partial?.error ?? "recorded until \(name)")
    report.error = error
    return report
  }

  /// How the child ended, once it has: its pid was the group's id.
  struct Ending {
    var signal: Int32?
    var status: Int32

    /// Without reaping it (WNOWAIT): while it is a zombie its pid, the group's id, cannot
    /// be given to another process, so the group can still be signalled safely.
    static func of(_ pid: pid_t) -> Ending? {
      var info = siginfo_t()
      guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 else {
        // Reaped by someone else: ended, how is not known.
        return errno == ECHILD ? Ending(signal: nil, status: -1) : nil
      }
      guard info._sifields._sigchld.si_pid == pid else { return nil }
      let status = info._sifields._sigchld.si_status
      return info.si_code == CLD_EXITED ? Ending(signal: nil, status: status) : Ending(signal: status, status: status)
    }
  }

  /// SIGKILL to the child's group and to every process the scenario left behind: orphans
  /// are reparented to the harness (a subreaper, CPerfCrash_becomeSubreaper) even when
  /// they started process groups of their own.
  static func endLeftoverProcesses(group: Int32) {
    kill(-group, SIGKILL)
    // Each round ends the orphans seen; their own children are reparented here next. The
    // scenario's process itself is reaped by `run`.
    for _ in 0..<64 {
      let orphans = Self.children(of: getpid()).subtracting([group])
      if orphans.isEmpty { return }
      for pid in orphans {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
      }
    }
  }

  /// The children of every thread of `pid`, from /proc.
  static func children(of pid: Int32) -> Set<Int32> {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
    var result = Set<Int32>()
    for task in tasks {
      guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/children", encoding: .utf8) else {
        continue
      }
      result.formUnion(
        text.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
    }
    return result
  }

  /// Why the harness killed a child it had stopped, as the timeout error goes on.
  private enum Kill: CustomStringConvertible {
    case afterBacktrace, afterGrace

    var description: String {
      let stop = ScenarioProcess.signalName(ScenarioProcess.stopSignal)
      switch self {
      case .afterBacktrace: return ": stopped with \(stop), then killed (SIGKILL) once its backtrace was written"
      case .afterGrace: return " and was killed (SIGKILL) \(ScenarioProcess.stopGraceSeconds) s after \(stop)"
      }
    }
  }

  /// The child gets the scenario to run and the whole recording configuration in one
  /// file: nothing of it is re-spelt as flags.
  private func childArguments(
    _ name: String, variant: ScenarioVariant, iterations: Int, configuration: String, result: String
  ) -> [String] {
    [
      "scenario", name, "--variant", variant.rawValue, "--iterations", String(iterations),
      "--child-configuration", configuration, "--child-result", result,
    ]
  }

  static func signalName(_ number: Int32) -> String {
    let names: [Int32: String] = [
      SIGSEGV: "SIGSEGV", SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGILL: "SIGILL", SIGFPE: "SIGFPE",
      SIGTRAP: "SIGTRAP", SIGQUIT: "SIGQUIT", SIGKILL: "SIGKILL", SIGTERM: "SIGTERM", SIGINT: "SIGINT",
      SIGPIPE: "SIGPIPE",
    ]
    return names[number] ?? "signal \(number)"
  }

  /// The Swift runtime prints "Fatal error: …" before a trap.
  static func fatalMessage(_ lines: [String]) -> String? {
    lines.first { $0.contains("Fatal error:") }.map { $0.trimmingCharacters(in: .whitespaces) }
  }

  /// The backtracer's block for the crashed thread: from "Thread N … crashed:" to the next
  /// blank line.
  static func crashingStack(_ lines: [String]) -> [String] {
    guard let start = lines.firstIndex(where: { $0.hasPrefix("Thread ") && $0.hasSuffix("crashed:") }) else {
      return []
    }
    return Array(lines[(start + 1)...].drop { $0.isEmpty }.prefix { !$0.isEmpty }.prefix(64))
  }
}

/// Drains the child's output on its own thread, so a chatty child never blocks on a full
/// pipe: each chunk goes on to `passingTo` as it arrives (the person running it sees what
/// the scenario prints, and a crash's backtrace), and only the last `tailBytes` are kept,
/// for the report's tail, whatever the child writes.
final class StandardErrorCollector: @unchecked Sendable {
  static let tailBytes = 256 << 10
  private let done = DispatchSemaphore(value: 0)
  private let lock = NSLock()
  private var tail = Data()
  private var dropped = 0

  init(_ handle: FileHandle, passingTo destination: FileHandle? = nil) {
    Thread {
      while case let chunk = handle.availableData, !chunk.isEmpty {
        destination?.write(chunk)
        self.lock.withLock {
          self.tail.append(chunk)
          // Into a fresh buffer, and only at twice the tail: Data.removeFirst keeps its
          // storage and appends grow it, so a 2 GiB flood took 2.1 GB.
          if self.tail.count > 2 * Self.tailBytes {
            self.dropped += self.tail.count - Self.tailBytes
            self.tail = Data(self.tail.suffix(Self.tailBytes))
          }
        }
      }
      self.done.signal()
    }.start()
  }

  /// The last `tailBytes` the child wrote, once every writer closed the pipe or `seconds`
  /// passed: a process the scenario left behind (its own child, or a backtracer orphaned
  /// by SIGKILL) can hold the pipe open for as long as it lives. `heldOpen` says the wait
  /// was cut; `droppedBytes` counts what came before the tail.
  func finish(within seconds: Int) -> (text: String, heldOpen: Bool, droppedBytes: Int) {
    let closed = done.wait(timeout: .now() + .seconds(seconds)) == .success
    return lock.withLock {
      let excess = max(tail.count - Self.tailBytes, 0)
      return (String(decoding: tail.suffix(Self.tailBytes), as: UTF8.self), !closed, dropped + excess)
    }
  }
}

/// Watches for the backtracer the stop signal starts: the Swift runtime's handler spawns
/// it from the signalled (main) thread and waits for it, then returns.
struct BacktracerWatch {
  let pid: Int32
  private var before: Set<Int32> = []
  private var seen: Set<Int32> = []

  init(pid: Int32) {
    self.pid = pid
  }

  /// Call before the stop signal: processes the scenario itself started are not the backtracer.
  mutating func start() {
    before = children() ?? []
  }

  /// A process the main thread started after the stop came and went. Without
  /// /proc/PID/task/TID/children this never answers yes, and the grace period applies.
  mutating func hasFinished() -> Bool {
    guard let now = children() else { return false }
    seen.formUnion(now.subtracting(before))
    return !seen.isEmpty && seen.isDisjoint(with: now)
  }

  private func children() -> Set<Int32>? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else {
      return nil
    }
    return Set(text.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
  }
}
