import ArgumentParser
import CPerfCrash
import Foundation
import PerfHarness
import PerfReports

/// `perfharness record`'s process: the program started with the recorder preloaded, waited
/// for, and the reports its processes wrote at their exits read back.
struct ProgramLaunch {
  var executable: String
  var arguments: [String]
  /// libPerfHarnessPreload.so.
  var library: String
  var settings: ProgramRecording.Settings
  /// SIGTERM at this many seconds (the recorder ends the program through exit(), so its
  /// report is written), SIGKILL `graceSeconds` later; nil: none.
  var timeoutSeconds: Int?
  /// How long a program stopped by --timeout, SIGINT or SIGTERM has to end before SIGKILL.
  var graceSeconds = ScenarioProcess.stopGraceSeconds
  /// Where the program's stdout goes: the harness's stderr when the harness's stdout
  /// carries a report (--format json or markdown), so that it stays whole.
  var programOutputToStandardError = false

  /// How the program ended and what its processes recorded.
  struct Outcome {
    var executable: String
    var arguments: [String]
    var pid: pid_t
    var ending: ScenarioProcess.Ending
    var wallTimeMilliseconds: Double
    /// The program's own report, when it wrote one at its exit.
    var recorded: Report?
    /// Reports of processes it fork+exec'd, by pid.
    var children: [Report]
    /// Why the recorder could not write the program's report, when it could tell.
    var lost: String? = nil
    /// The SIGINT or SIGTERM the harness caught meanwhile.
    var interruption: Int32?
    /// Stopped at --timeout.
    var timedOut = false

    /// The program's report, judged by how it ended: a non-zero exit status or a fatal
    /// signal is a crashed run (exit 3), as a scenario that throws is; a SIGINT or SIGTERM
    /// is an interrupted one.
    func report(name: String, instruments: Set<Instrument>) -> Report {
      var program = recorded?.program ?? ProgramInfo(executable: executable, arguments: arguments, pid: Int(pid))
      let signal = ending.signal.map(ScenarioProcess.signalName)
      if let signal {
        program.signal = signal
      } else {
        program.exitStatus = Int(ending.status)
      }
      guard var report = recorded else {
        let error =
          signal.map { "the program was killed by \($0) before it could write its recording" }
          ?? lost.map { "the program exited with status \(ending.status) without its recording: \($0)" }
          ?? "the program exited with status \(ending.status) without writing its recording: it called _exit(), or exec'd a program the recorder cannot load into"
        var crashed = Report.crashed(
          scenario: name, variant: ProgramRecording.variant, iterations: 1,
          instruments: Instrument.allCases.filter(instruments.contains), error: error,
          wallTimeMilliseconds: wallTimeMilliseconds,
          crash: CrashInfo(signal: signal, timedOut: false, stack: [], standardErrorTail: []))
        if let interruption, signal != nil {
          crashed.status = .interrupted
          crashed.error = "interrupted by \(ScenarioProcess.signalName(interruption)): " + error
        }
        crashed.crash?.timedOut = timedOut
        crashed.program = program
        return crashed
      }
      report.program = program
      // The name the command line gave (sh), not the file it links to (dash): the folder's.
      report.scenario.name = name
      report.wallTimeMilliseconds = wallTimeMilliseconds
      if timedOut {
        // Stopped by the harness, not by the program's own failure: recorded until then.
        report.status = .crashed
        report.error =
          "the program ran past --timeout and was stopped with \(program.signal ?? "SIGTERM"); recorded until then"
        report.crash = CrashInfo(signal: program.signal, timedOut: true, stack: [], standardErrorTail: [])
      } else if let signal = ending.signal.map(ScenarioProcess.signalName) {
        // The partial report a fatal signal left.
        report.status = interruption != nil ? .interrupted : .crashed
        report.crash = CrashInfo(signal: signal, timedOut: false, stack: [], standardErrorTail: [])
        if report.error == nil { report.error = "the program was killed by \(signal)" }
      } else if let ended = program.signal, ended == "SIGINT" || ended == "SIGTERM" {
        report.status = .interrupted
        report.error = "the program was stopped by \(ended); the recording until then"
      } else if let interruption {
        // It handles the signal itself and ended when it chose to: still not a run that passed.
        report.status = .interrupted
        report.error =
          "interrupted by \(ScenarioProcess.signalName(interruption)); the program then exited with status \(ending.status)"
      } else if ending.status != 0 {
        report.status = .crashed
        report.error = "the program exited with status \(ending.status)"
      }
      return report
    }
  }

  /// Runs the program to its end. Its stdin, stdout and stderr are the harness's, and it
  /// stays in the harness's process group (a Ctrl-C at the terminal reaches both; the
  /// harness waits for the program's report). A SIGTERM to the harness is passed on.
  func run() throws -> Outcome {
    let results = URL(fileURLWithPath: settings.resultDirectory)
    let settingsFile = results.deletingLastPathComponent().appendingPathComponent(
      ".perfharness-record-\(getpid()).json")
    try? FileManager.default.removeItem(at: results)
    do {
      try FileManager.default.createDirectory(at: results, withIntermediateDirectories: true)
      try JSONEncoder().encode(settings).write(to: settingsFile)
    } catch {
      throw HarnessError("cannot prepare \(results.path) for the recording: \(ReportWriter.describe(error))")
    }
    defer {
      try? FileManager.default.removeItem(at: results)
      try? FileManager.default.removeItem(at: settingsFile)
    }
    var environment = ProcessInfo.processInfo.environment
    environment["LD_PRELOAD"] = [library, environment["LD_PRELOAD"]].compactMap { $0 }.filter { !$0.isEmpty }
      .joined(separator: ":")
    environment[ProgramRecording.settingsEnvironmentKey] = settingsFile.path
    // The recorder sets a parent-death signal in the program: it ends when the harness dies.
    environment[ProgramRecording.harnessEnvironmentKey] = String(getpid())
    if settings.configuration.instruments.contains(.leaks) {
      // The interposer then tracks blocks from the process's start (CPerfAlloc_trackAllBlocks).
      environment["PERFHARNESS_TRACK_ALL_BLOCKS"] = "1"
    }
    let start = ContinuousClock.now
    let pid = try Self.spawn(
      executable, arguments: arguments, environment: environment, outputToStandardError: programOutputToStandardError)
    var interruption: Int32?
    var ending: ScenarioProcess.Ending?
    var timedOut = false
    var stoppedAt: ContinuousClock.Instant?
    while ending == nil {
      let now = ContinuousClock.now
      if interruption == nil, case let signal = CPerfCrash_interruption(), signal != 0 {
        interruption = signal
        // The terminal's Ctrl-C already reached the program; a kill of the harness alone did not.
        if signal == SIGTERM { kill(pid, SIGTERM) }
        stoppedAt = stoppedAt ?? now
      }
      if let timeoutSeconds, stoppedAt == nil, now > start + .seconds(timeoutSeconds) {
        timedOut = true
        stoppedAt = now
        kill(pid, SIGTERM)
      }
      if let stoppedAt, now > stoppedAt + .seconds(graceSeconds) {
        // It handles the signal itself and went on, or hangs in its exit handlers.
        kill(pid, SIGKILL)
      }
      ending = ScenarioProcess.Ending.of(pid)
      if ending == nil { usleep(10_000) }
    }
    var status: Int32 = 0
    waitpid(pid, &status, 0)
    let wallTime = (ContinuousClock.now - start).milliseconds
    let failure = results.appendingPathComponent("\(pid).failure")
    if let reason = try? String(contentsOf: failure, encoding: .utf8) {
      throw HarnessError("perfharness failed recording \(executable), not the program: \(reason)")
    }
    var recorded: Report?
    var children: [Report] = []
    let files = (try? FileManager.default.contentsOfDirectory(atPath: results.path)) ?? []
    for file in files.sorted() where file.hasSuffix(".json") {
      let path = results.appendingPathComponent(file).path
      guard let data = try? BoundedFile.read(path, limit: BoundedFile.reportLimit) else { continue }
      let report: Report
      do {
        report = try ReportJSON.decode(data)
      } catch {
        throw HarnessError("the recording \(path) does not decode: \(error)")
      }
      if file == "\(pid).json" { recorded = report } else { children.append(report) }
    }
    let lost = try? String(contentsOf: results.appendingPathComponent("\(pid).lost"), encoding: .utf8)
    return Outcome(
      executable: executable, arguments: arguments, pid: pid, ending: ending!, wallTimeMilliseconds: wallTime,
      recorded: recorded, children: children, lost: lost, interruption: interruption, timedOut: timedOut)
  }

  /// With the harness's descriptors 0-2 (its stdout the harness's stderr when
  /// `outputToStandardError`), in its process group.
  private static func spawn(
    _ executable: String, arguments: [String], environment: [String: String], outputToStandardError: Bool
  ) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if outputToStandardError { posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO) }
    let (pid, status) = ChildProcess.spawnFresh(
      executable, arguments: arguments, environment: environment, actions: &actions, ownGroup: false)
    guard status == 0 else {
      throw HarnessError("cannot start \(executable): \(String(cString: strerror(status)))")
    }
    return pid
  }
}

extension ProgramLaunch {
  /// The program's path: as given when it has a '/', else found on PATH as a shell would.
  /// - Throws: `ValidationError` (exit 64) naming it when there is no such executable.
  static func resolve(_ program: String) throws -> String {
    if program.contains("/") {
      if let reason = cannotRun(program) {
        throw ValidationError(
          "cannot run '\(program)': \(reason); accepted: an executable file, by path or by name on PATH")
      }
      return program
    }
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    for directory in path.split(separator: ":") {
      let candidate = "\(directory)/\(program)"
      var isDirectory: ObjCBool = false
      if FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue,
        access(candidate, X_OK) == 0
      {
        return candidate
      }
    }
    throw ValidationError(
      "no executable '\(program)' on PATH; accepted: an executable file, by path or by name on PATH")
  }

  /// Why `path` cannot be run; nil when it is an executable file. A folder passes
  /// access(X_OK) and would fail only at the spawn, after the report folder was made.
  private static func cannotRun(_ path: String) -> String? {
    guard access(path, X_OK) == 0 else { return String(cString: strerror(errno)) }
    var status = stat()
    guard stat(path, &status) == 0 else { return String(cString: strerror(errno)) }
    switch status.st_mode & S_IFMT {
    case S_IFREG: return nil
    case S_IFDIR: return "it is a directory"
    default: return "it is not a regular file"
    }
  }

  /// Refuses, with the reason, a program the dynamic loader would run without the recorder:
  /// one linked statically (no loader runs in it) or setuid/setgid (the loader ignores
  /// LD_PRELOAD there). Scripts are let through: their interpreter loads it.
  static func checkLoadable(_ path: String) throws {
    var status = stat()
    guard stat(path, &status) == 0 else {
      throw HarnessError("cannot read \(path): \(String(cString: strerror(errno)))")
    }
    if status.st_mode & (S_ISUID | S_ISGID) != 0 {
      throw HarnessError(
        "\(path) is setuid or setgid: the dynamic loader ignores LD_PRELOAD in it, so perfharness record cannot load its recorder; record a copy without the bit"
      )
    }
    guard let handle = FileHandle(forReadingAtPath: path) else {
      throw HarnessError("cannot read \(path): \(String(cString: strerror(errno)))")
    }
    defer { try? handle.close() }
    let header = (try? handle.read(upToCount: 1 << 16)) ?? Data()
    guard let elf = ELFHeader(header) else { return }
    if !elf.hasInterpreter {
      throw HarnessError(
        "\(path) is statically linked: no dynamic loader runs in it, so perfharness record cannot load its recorder; record a dynamically linked build (for Swift, without -static-executable)"
      )
    }
  }

  /// libPerfHarnessPreload.so, beside this executable as `swift build` puts it.
  static func preloadLibrary() throws -> String {
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    let library = executable.deletingLastPathComponent().appendingPathComponent("libPerfHarnessPreload.so").path
    guard FileManager.default.fileExists(atPath: library) else {
      throw HarnessError(
        "\(library) is not built; build it with 'swift build --product PerfHarnessPreload' (with the same -c as perfharness; make build does both)"
      )
    }
    return library
  }
}

/// What `checkLoadable` reads of a 64-bit little-endian ELF file: whether a program header
/// names an interpreter (PT_INTERP), which every dynamically linked executable has.
struct ELFHeader {
  var hasInterpreter: Bool

  /// nil for anything but a 64-bit little-endian ELF file whose program headers are in `bytes`.
  init?(_ bytes: Data) {
    let data = [UInt8](bytes)
    guard data.count >= 64, data[0] == 0x7F, data[1] == 0x45, data[2] == 0x4C, data[3] == 0x46, data[4] == 2,
      data[5] == 1
    else { return nil }
    func word(_ offset: Int, _ size: Int) -> Int {
      (0..<size).reduce(0) { $0 | Int(data[offset + $1]) << (8 * $1) }
    }
    let table = word(0x20, 8)
    let entrySize = word(0x36, 2)
    let count = word(0x38, 2)
    guard entrySize >= 4, table + entrySize * count <= data.count else { return nil }
    let interpreterType = 3
    hasInterpreter = (0..<count).contains { word(table + $0 * entrySize, 4) == interpreterType }
  }
}
