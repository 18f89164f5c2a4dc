import CPerfCrash
import Foundation
import PerfHarness
import PerfReports

extension ScenarioProcess {
  /// The signal the harness sends the child's main thread on --timeout: the child writes
  /// its partial report, then the Swift runtime's backtracer prints where it hung. (The
  /// backtracer also handles SIGQUIT, but its helper process outlives a child that dies of
  /// it, holding the child's stderr open.)
  static let stopSignal = SIGABRT
  /// How long a signalled thread waits for the partial report before the process dies
  /// as it would have without one.
  static let reportWaitMilliseconds: Int64 = 10_000
  /// How long the harness waits after the stop signal before SIGKILL: the report wait,
  /// then the backtracer's symbolication.
  static let stopGraceSeconds = 20
  /// How long the harness reads the child's stderr after the child ended, while another
  /// process still holds it open.
  static let standardErrorDrainSeconds = 5
  /// The child's exit status when the harness's own code failed in it (EX_SOFTWARE); the
  /// parent then exits 1, naming the harness, not the scenario.
  static let childHarnessFailureStatus: Int32 = 70

  /// For the child: the harness's own failure, in the result file, then exit
  /// ``childHarnessFailureStatus``.
  static func failInChild(_ reason: String, resultPath: String) -> Never {
    if let data = try? JSONEncoder().encode(ChildHarnessFailure(harnessFailure: reason)) {
      try? data.write(to: URL(fileURLWithPath: resultPath))
    }
    FileHandle.standardError.write(Data("perfharness: \(reason)\n".utf8))
    exit(childHarnessFailureStatus)
  }

  /// For the child: writes its result to the pipe the harness reads on
  /// `ChildProcess.resultDescriptor`; false when there is none or it failed.
  static func handOver(_ data: Data) -> Bool {
    let descriptor = ChildProcess.resultDescriptor
    var status = stat()
    guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFIFO else { return false }
    var sent = 0
    while sent < data.count {
      let written = data.withUnsafeBytes { write(descriptor, $0.baseAddress! + sent, data.count - sent) }
      if written < 0 && errno == EINTR { continue }
      guard written > 0 else { return false }
      sent += written
    }
    return true
  }

  /// For the child: the result pipe is the harness's, not for what the scenario starts.
  static func keepResultPipeToItself() {
    let descriptor = ChildProcess.resultDescriptor
    let flags = fcntl(descriptor, F_GETFD)
    if flags != -1 { _ = fcntl(descriptor, F_SETFD, flags | FD_CLOEXEC) }
  }

  /// The harness's pid, for the child: it ends when the harness does.
  static let parentEnvironmentKey = "PERFHARNESS_PARENT_PID"

  /// For the child: SIGKILL when the harness that started it dies (even of SIGKILL), so
  /// that no scenario spins on with nothing left to enforce --timeout or read its report.
  static func dieWithParent() {
    // getenv and strtol allocate nothing: ProcessInfo's dictionary of the environment would
    // churn the heap before the recording, where the leak corpus keeps its dangling words.
    guard let value = getenv(parentEnvironmentKey) else { return }
    let parent = Int32(truncatingIfNeeded: strtol(value, nil, 10))
    if parent > 0 && CPerfCrash_dieWithParent(parent) == 1 { exit(1) }
  }
}

/// The child's half of crash survival: while the scenario's body runs, a fatal signal or
/// the harness's stop signal parks the signalled thread (CPerfCrash) and wakes a reporter
/// thread, which builds the report of the run so far and writes it where the parent reads
/// the child's result. Then the signal goes on to the runtime's backtracer.
@MainActor
final class CrashReporter: ScenarioInterruptions {
  let resultPath: String
  private var reporter: pthread_t?

  init(resultPath: String) {
    self.resultPath = resultPath
  }

  func scenarioWillStart(_ partialReport: PartialReport) {
    let armed = CPerfCrash_arm(ScenarioProcess.stopSignal, ScenarioProcess.reportWaitMilliseconds, 1)
    guard armed == 0 else {
      FileHandle.standardError.write(
        Data(
          "perfharness: the crash handler is not installed (\(String(cString: strerror(armed)))): a crash loses the recording\n"
            .utf8))
      return
    }
    let job = Unmanaged.passRetained(ReporterJob(partialReport: partialReport, resultPath: resultPath)).toOpaque()
    // The reporter starts with every signal blocked, as the sampler's own thread does: it
    // is never sampled and a process-directed signal never lands on it.
    var all = sigset_t()
    var saved = sigset_t()
    sigfillset(&all)
    pthread_sigmask(SIG_SETMASK, &all, &saved)
    var thread = pthread_t()
    let created = pthread_create(
      &thread, nil,
      { argument in
        Unmanaged<ReporterJob>.fromOpaque(argument!).takeRetainedValue().run()
        return nil
      }, job)
    pthread_sigmask(SIG_SETMASK, &saved, nil)
    guard created == 0 else {
      Unmanaged<ReporterJob>.fromOpaque(job).release()
      _ = CPerfCrash_disarm()
      CPerfCrash_release()
      FileHandle.standardError.write(Data("perfharness: no crash reporter thread (error \(created))\n".utf8))
      return
    }
    reporter = thread
  }

  func scenarioDidEnd() {
    guard let reporter else { return }
    self.reporter = nil
    // A signal that won the race is being reported: the join waits for it (bounded by the
    // handler's wait), and the process then dies of that signal.
    let signalled = CPerfCrash_disarm()
    pthread_join(reporter, nil)
    if signalled == 0 { CPerfCrash_release() }
  }
}

/// What the child's result file holds instead of a report when the harness's own code
/// failed in it, or from the end of the scenario's code until the report replaces it: a
/// process that dies then (the symbolizer on a small stack) died in the harness's code.
struct ChildHarnessFailure: Codable {
  var harnessFailure: String

  static let afterTheScenario =
    "the scenario's code had finished; the harness's own code then ended its process while stopping the instruments and building the report (symbolizing, leak scan)"
}

extension CrashReporter {
  func harnessFailed(_ reason: String) {
    scenarioDidEnd()
    ScenarioProcess.failInChild(reason, resultPath: resultPath)
  }

  func scenarioWillBeReported() {
    if let data = try? JSONEncoder().encode(ChildHarnessFailure(harnessFailure: ChildHarnessFailure.afterTheScenario)) {
      try? data.write(to: URL(fileURLWithPath: resultPath))
    }
  }
}

/// What the reporter thread does once woken.
private final class ReporterJob: @unchecked Sendable {
  let partialReport: PartialReport
  let resultPath: String

  init(partialReport: PartialReport, resultPath: String) {
    self.partialReport = partialReport
    self.resultPath = resultPath
  }

  func run() {
    var thread: Int32 = 0
    let signal = CPerfCrash_waitForSignal(&thread)
    guard signal != 0 else { return }
    defer { CPerfCrash_reportDone() }
    guard CPerfCrash_parkMainThread(2_000) == 1 else {
      complain("the main thread did not stop within 2 s")
      return
    }
    let name = ScenarioProcess.signalName(signal)
    let whose = thread == getpid() ? "the main thread" : "thread \(thread)"
    let report = partialReport.build(error: "recorded until \(name) on \(whose)")
    do {
      try ReportJSON.encode(report, pretty: false).write(to: URL(fileURLWithPath: resultPath), options: .atomic)
    } catch {
      complain("cannot write \(resultPath): \(error)")
    }
  }

  private func complain(_ why: String) {
    FileHandle.standardError.write(Data("perfharness: no partial report: \(why)\n".utf8))
  }
}
