import ArgumentParser
import CPerfCrash
import Foundation
import PerfHarness
import PerfReports

struct RecordCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "record",
    abstract: "Record an unmodified program under the instruments: perfharness record [options] -- CMD [ARGS...]",
    discussion: """
      CMD runs with the recorder preloaded (LD_PRELOAD of libPerfHarnessPreload.so, built \
      beside perfharness), from before its main to after its exit handlers; the report goes to \
      DIR/<executable name>/. Generations: --mark-every, `kill -USR2 PID`, or the program's own \
      call of perfharness_mark("label") (declare it weak). SIGINT and SIGTERM end a program that \
      does not handle them through exit(), so its report is still written; one that goes on \
      is killed --grace seconds later (exit 130/143, status interrupted), and the program dies \
      with the harness. With --format json or markdown the program's stdout goes to stderr, so \
      that stdout holds the report alone. A process it \
      fork+execs is recorded too, in DIR/<name>/children/<pid>-<its name>/. CMD's non-zero exit \
      status or death by a signal is exit 3 (the report holds the status).
      """)

  @OptionGroup var recording: RecordingOptions<ProgramSubject>

  @Option(
    name: .customLong("mark-every"),
    help: ArgumentHelp("Mark a generation every this many seconds (0.01-86400).", valueName: "seconds"))
  var markEvery: Double?

  @Option(
    help: ArgumentHelp(
      "Stop the program after this many seconds (1-86400): SIGTERM, which writes its report, then SIGKILL --grace seconds later; exit 3.",
      valueName: "seconds"))
  var timeout: Int?

  @Option(
    help: ArgumentHelp(
      "How long a program stopped by --timeout, SIGINT or SIGTERM has to end before SIGKILL (0-3600).",
      valueName: "seconds"))
  var grace = ScenarioProcess.stopGraceSeconds

  @OptionGroup var checks: CheckOptions<ProgramSubject>

  @Option(
    help: ArgumentHelp(
      "Compare with this stored report (or a folder of <name>/report.json); exit 2 on a regression.",
      valueName: "file"))
  var baseline: String?

  @OptionGroup var tolerances: ComparisonOptions

  @Argument(parsing: .postTerminator, help: ArgumentHelp("The program and its arguments, after --.", valueName: "cmd"))
  var command: [String] = []

  mutating func validate() throws {
    guard !CommandLineParsing.validationDeferred else { return }
    guard let program = command.first, !program.isEmpty else {
      throw ValidationError(
        "record needs the program to run after --; accepted: perfharness record [options] -- CMD [ARGS...]")
    }
    if let timeout, !(1...86_400).contains(timeout) {
      throw ValidationError("--timeout must be between 1 and 86400 seconds, got \(timeout)")
    }
    if !(0...3_600).contains(grace) {
      throw ValidationError("--grace must be between 0 and 3600 seconds, got \(grace)")
    }
    if let markEvery, !(markEvery.isFinite && (0.01...86_400).contains(markEvery)) {
      throw ValidationError("--mark-every must be between 0.01 and 86400 seconds, got \(markEvery)")
    }
    _ = try ProgramLaunch.resolve(program)
    // Without --instruments a program records all three.
    try recording.validate(lackingLeaks: [])
    try checks.requireThresholds(named: name)
    _ = try tolerances.tolerances()
    if let baseline { _ = try storedBaseline(baseline) }
  }

  /// The report's name: the executable's file name in a scenario name's characters.
  var name: String { ProgramRecording.reportName(forExecutable: command.first ?? "") }

  /// Without `--instruments`: all three (a program declares nothing), which the limits
  /// given with `--check` need anyway. Named instruments are kept as given.
  private func configuration() throws -> RecordingConfiguration {
    var configuration = recording.configuration(memoryWarningAtEnd: false)
    if recording.instruments == nil { configuration.instruments = Set(Instrument.allCases) }
    return configuration
  }

  func run() throws {
    let executable = try ProgramLaunch.resolve(command[0])
    try ProgramLaunch.checkLoadable(executable)
    let library = try ProgramLaunch.preloadLibrary()
    // A file size limit then fails the write that passes it instead of killing the process.
    signal(SIGXFSZ, SIG_IGN)
    _ = CPerfCrash_catchInterrupts()
    // Read before the folder is emptied: --baseline may name the report this run replaces.
    let stored = try baseline.map(storedBaseline)
    let folder = try ReportFolder(output: recording.output, folders: [name])
    let configuration = try configuration()
    let launch = ProgramLaunch(
      executable: executable, arguments: Array(command.dropFirst()), library: library,
      settings: ProgramRecording.Settings(
        configuration: configuration,
        resultDirectory: folder.url.appendingPathComponent(".perfharness-results-\(getpid())").path,
        markEverySeconds: markEvery), timeoutSeconds: timeout, graceSeconds: grace,
      programOutputToStandardError: recording.format != .text)
    let outcome = try launch.run()
    var report = outcome.report(name: name, instruments: configuration.instruments)
    if !outcome.children.isEmpty {
      report.program?.children = try writeChildren(outcome.children, in: folder)
    }
    try checks.judge(&report, named: name, baseline: stored, tolerances: try tolerances.tolerances())
    var writeFailure: (any Error)?
    var written: ReportWriter.Written?
    do {
      written = try ReportWriter(directory: recording.output).write(report, into: folder)
    } catch {
      writeFailure = error
    }
    switch recording.format {
    case .text:
      print(
        TerminalText.lines(RunSummaryText.render(report, reportPath: written?.json, pagePath: written?.page)),
        terminator: "")
    case .json: print(String(decoding: try ReportJSON.encode(report, pretty: false), as: UTF8.self))
    case .markdown:
      print(MarkdownSummary.render(report, reportPath: written?.json, pagePath: written?.page), terminator: "")
    }
    if let writeFailure { throw writeFailure }
    let children = zip(outcome.children, report.program?.children ?? []).map { ($0, "\(name)/\($1.report)") }
    try ReportWriter(directory: recording.output).writeIndex([(report, name)] + children, format: recording.format)
    withExtendedLifetime(folder) {}
    switch report.status {
    case .interrupted: throw ExitCode(128 + (outcome.interruption ?? SIGINT))
    case .crashed: throw ExitCodes.crashed
    case .failed: throw ExitCodes.checkFailed
    case .passed: break
    }
  }

  /// Each recorded child process's report, in `children/<pid>-<name>/` of the program's
  /// folder.
  private func writeChildren(_ children: [Report], in folder: ReportFolder) throws -> [ProgramInfo.Child] {
    try children.map { child in
      let pid = child.program?.pid ?? 0
      let relative = "children/\(pid)-\(child.scenario.name)"
      try ReportWriter(directory: recording.output).write(child, into: folder, subfolder: relative)
      return ProgramInfo.Child(pid: pid, executable: child.program?.executable ?? "", report: relative)
    }
  }

  /// `--baseline`: a report file, or a folder holding `<name>/report.json` as `--output`
  /// writes it (or `report.json` itself).
  private func storedBaseline(_ path: String) throws -> (report: Report, path: String) {
    let source = BaselineSource(path: path)
    let run = Report.ScenarioInfo(
      name: name, variant: ProgramRecording.variant, iterations: 1,
      instruments: Instrument.allCases.filter(try configuration().instruments.contains))
    return try source.report(
      at: try source.reportPath(in: [name, "."], layout: "<name>/report.json"), for: run,
      tolerances: try tolerances.tolerances())
  }
}
