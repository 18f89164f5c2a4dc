// The recorder `perfharness record -- CMD` preloads into an unmodified program: the same
// instruments as a scenario's, started from CPerfPreload's constructor and reported from
// its destructor into the result folder the harness reads.
import CPerfPreload
import Foundation
import PerfHarness
import PerfReports

/// The process's recording, between the constructor and the destructor. CPerfPreload
/// calls in one at a time: the constructor before any other thread of ours exists, marks
/// under the recording's own lock, the destructor after the marker thread has ended.
nonisolated(unsafe) private var recording: ProgramRecording?
nonisolated(unsafe) private var settings: ProgramRecording.Settings?
nonisolated(unsafe) private var markCount = 0
/// The recorded process, set when the settings are read: a crash's partial report may be
/// written by a copy of it (a fork made in the crash handler), which reports as the process
/// it copies.
nonisolated(unsafe) private var recordedPid: pid_t = 0

/// Reads the settings file the harness named.
/// - Returns: the mark period in seconds (0: none), or -1 when this process is not
///   recorded (no usable settings: the reason is on stderr).
@_cdecl("cperf_preload_settings")
public func preloadSettings() -> Double {
  guard let path = getenv(ProgramRecording.settingsEnvironmentKey).map({ String(cString: $0) }) else { return -1 }
  recordedPid = getpid()
  let loaded: ProgramRecording.Settings
  do {
    loaded = try JSONDecoder().decode(
      ProgramRecording.Settings.self, from: BoundedFile.read(path, limit: BoundedFile.handOverLimit))
  } catch {
    complain("cannot read the recording settings \(path): \(error)", in: nil)
    return -1
  }
  settings = loaded
  return loaded.markEverySeconds ?? 0
}

/// Whether the instruments the settings name run threads of their own (the Time
/// Profiler's discovery and clock): then the recorder's own threads cost the program nothing
/// more, and start with them.
@_cdecl("cperf_preload_runs_threads")
public func preloadRunsThreads() -> Int32 {
  settings?.configuration.instruments.contains(.time) == true ? 1 : 0
}

/// Starts the instruments as the settings say.
/// - Returns: 0, or -1 when they could not start (the reason is on stderr and in the
///   result folder).
@_cdecl("cperf_preload_start")
public func preloadStart() -> Int32 {
  guard let settings else { return -1 }
  do {
    recording = try ProgramRecording(configuration: settings.configuration)
  } catch {
    complain("the instruments could not start: \(error)", in: settings.resultDirectory)
    return -1
  }
  return 0
}

/// Refuses to record this process: `reason` goes to stderr and to the harness, which exits 1
/// naming it.
@_cdecl("cperf_preload_refuse")
public func preloadRefuse(_ reason: UnsafePointer<CChar>) {
  complain(String(cString: reason), in: settings?.resultDirectory)
  settings = nil
}

/// The file that names why this process's report was lost (`<pid>.lost` in the result
/// folder), for the C side to write from a signal handler or `_exit`.
/// - Returns: 0, or -1 when there are no settings or the path does not fit in `capacity`.
@_cdecl("cperf_preload_loss_path")
public func preloadLossPath(_ path: UnsafeMutablePointer<CChar>, _ capacity: Int32) -> Int32 {
  guard let settings else { return -1 }
  let file = URL(fileURLWithPath: settings.resultDirectory).appendingPathComponent("\(recordedPid).lost").path
  let bytes = Array(file.utf8CString)
  guard bytes.count <= Int(capacity) else { return -1 }
  bytes.withUnsafeBufferPointer { path.update(from: $0.baseAddress!, count: bytes.count) }
  return 0
}

@_cdecl("cperf_preload_mark")
public func preloadMark(_ label: UnsafePointer<CChar>?) {
  guard let recording else { return }
  markCount += 1
  recording.markGeneration(label.map { String(cString: $0) } ?? "mark \(markCount)")
}

/// Builds this process's report and writes it as `<pid>.json` in the result folder.
/// - Parameter endingSignal: the SIGINT or SIGTERM the recorder turned into this exit, or 0.
@_cdecl("cperf_preload_finish")
public func preloadFinish(_ endingSignal: Int32) {
  guard let recording, let settings else { return }
  let report = recording.finish {
    var program = thisProgram()
    if endingSignal == SIGINT { program.signal = "SIGINT" }
    if endingSignal == SIGTERM { program.signal = "SIGTERM" }
    return program
  }
  write(report, to: settings.resultDirectory)
}

/// The partial report of a process a fatal signal is ending, written while the thread that
/// took it waits (CPerfCrash).
@_cdecl("cperf_preload_crashed")
public func preloadCrashed(_ signal: Int32, _ thread: Int32) {
  guard let recording, let settings else { return }
  let whose = thread == recordedPid ? "the main thread" : "thread \(thread)"
  let name = String(cString: strsignal(signal))
  guard
    let report = recording.finishAfterCrash(
      error: "recorded until signal \(signal) (\(name)) on \(whose); the leaks instrument did not scan a dying process",
      program: thisProgram)
  else {
    FileHandle.standardError.write(Data("perfharness: no partial report: the recording was busy\n".utf8))
    return
  }
  write(report, to: settings.resultDirectory)
}

private func thisProgram() -> ProgramInfo {
  let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "unknown"
  return ProgramInfo(executable: executable, arguments: Array(CommandLine.arguments.dropFirst()), pid: Int(recordedPid))
}

private func write(_ report: Report, to directory: String) {
  let result = URL(fileURLWithPath: directory).appendingPathComponent("\(recordedPid).json")
  do {
    try ReportJSON.encode(report, pretty: false).write(to: result, options: .atomic)
  } catch {
    complain("cannot write the recording to \(result.path): \(error)", in: directory)
  }
}

/// The recorder's own failure: on stderr, and as `<pid>.failure` for the harness, which
/// then exits 1 naming it.
private func complain(_ reason: String, in directory: String?) {
  FileHandle.standardError.write(Data("perfharness: \(reason)\n".utf8))
  guard let directory else { return }
  let file = URL(fileURLWithPath: directory).appendingPathComponent("\(recordedPid).failure")
  try? Data(reason.utf8).write(to: file)
}
