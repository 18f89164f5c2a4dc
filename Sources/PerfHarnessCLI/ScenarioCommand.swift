import ArgumentParser
import CPerfCrash
import Foundation
import PerfHarness
import PerfReports

struct ScenarioCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "scenario",
    abstract: "Run scenarios under the instruments and write their reports.",
    discussion: """
      With no NAME every scenario runs. Reports go to DIR/<scenario>/<variant>/report.json. \
      --format json prints each report as one line of JSON (JSON Lines) on stdout. Each \
      scenario runs in a child process: a crash or a --timeout is reported (exit 3) with the \
      signal and the crashing stack.
      """)

  @Argument(help: "Scenarios to run (default: all). See 'perfharness list'.")
  var names: [String] = []

  @OptionGroup var options: ScenarioOptions
  @OptionGroup var checks: CheckOptions<ScenarioSubject>

  @Option(
    help: ArgumentHelp(
      "Compare each run with this stored report (or folder of <scenario>/<variant>/report.json); exit 2 on a regression.",
      valueName: "file"))
  var baseline: String?

  @OptionGroup var tolerances: ComparisonOptions

  mutating func validate() throws {
    guard !CommandLineParsing.validationDeferred else { return }
    let catalog = PerfHarnessCLI.currentCatalog
    for name in names where catalog.scenario(named: name) == nil {
      throw ValidationError(
        "unknown scenario '\(name)'; \(Suggestion.didYouMean(name, among: catalog.names))"
          + "the scenarios are: \(catalog.names.joined(separator: ", "))")
    }
    try options.validate(for: selectedScenarios)
    for scenario in selectedScenarios { try checks.requireThresholds(named: scenario.name) }
    _ = try tolerances.tolerances()
    if let baseline {
      for scenario in selectedScenarios {
        _ = try BaselineSource(path: baseline).report(for: try setup(of: scenario), tolerances: tolerances.tolerances())
      }
    }
  }

  /// Without `--instruments`, what the scenario declares it needs, plus with `--check`
  /// whatever a limit needs (leaks, for the leak limits). Instruments named on the command
  /// line are kept as given: a limit they cannot measure fails as not measured.
  private func options(for scenario: Scenario) throws -> ScenarioOptions {
    guard options.instruments == nil, options.childResult == nil else { return options }
    var chosen = Set(scenario.instruments)
    if checks.check { chosen.formUnion(try checks.thresholds(for: scenario).requiredInstruments) }
    var adjusted = options
    adjusted.instruments = chosen
    return adjusted
  }

  /// How `scenario` will be run, as its report will say: what a baseline must match.
  private func setup(of scenario: Scenario) throws -> Report.ScenarioInfo {
    let instruments = try options(for: scenario).recordingConfiguration.instruments
    return Report.ScenarioInfo(
      name: scenario.name, variant: variant(of: scenario).rawValue,
      iterations: options.iterations ?? scenario.defaultIterations,
      instruments: Instrument.allCases.filter(instruments.contains))
  }

  private func variant(of scenario: Scenario) -> ScenarioVariant {
    options.variant.map(ScenarioVariant.init(rawValue:)) ?? scenario.variants[0]
  }

  var selectedScenarios: [Scenario] {
    let catalog = PerfHarnessCLI.currentCatalog
    return names.isEmpty ? catalog.scenarios : names.compactMap(catalog.scenario(named:))
  }

  func run() throws {
    if options.childResult != nil {
      ScenarioProcess.dieWithParent()
      ScenarioProcess.keepResultPipeToItself()
    } else if !options.inProcess {
      // Failing either leaves the harness as it was before: interrupts end it at once and
      // orphans go to init.
      _ = CPerfCrash_catchInterrupts()
      _ = CPerfCrash_becomeSubreaper()
    }
    // A file size limit (ulimit -f) then fails the write that passes it, which names its
    // file, instead of killing the process.
    signal(SIGXFSZ, SIG_IGN)
    let reports = try MainActor.assumeIsolated { try runAll() }
    // A child hands its report over in the file; the parent decides the exit code.
    if options.childResult != nil { return }
    if case let signal = CPerfCrash_interruption(), signal != 0 { throw ExitCode(128 + signal) }
    if reports.contains(where: { $0.status == .crashed }) { throw ExitCodes.crashed }
    if reports.contains(where: { $0.status == .failed }) { throw ExitCodes.checkFailed }
  }

  @MainActor
  private func runAll() throws -> [Report] {
    var reports: [Report] = []
    var written: [(report: Report, folder: String)] = []
    for scenario in selectedScenarios {
      let options = try options(for: scenario)
      var runner = ScenarioRunner(configuration: try options.configuration())
      if let childResult = options.childResult {
        // A crash or the parent's stop signal still hands over what was recorded.
        runner.interruptions = CrashReporter(resultPath: childResult)
      }
      let variant = variant(of: scenario)
      let iterations = options.iterations ?? scenario.defaultIterations
      Progress.report("running \(scenario.name) [\(variant)] ...")
      if let childResult = options.childResult {
        // The child's half of ScenarioProcess: run, hand the report over, print nothing.
        let report = runner.run(scenario, variant: variant, iterations: iterations)
        let encoded: Data
        do {
          encoded = try ReportJSON.encode(report, pretty: false)
        } catch {
          ScenarioProcess.failInChild(
            "cannot encode the scenario's result: \(ReportWriter.describe(error))", resultPath: childResult)
        }
        do {
          try encoded.write(to: URL(fileURLWithPath: childResult))
        } catch {
          // A full disk or a file size limit: the result pipe still takes it to the harness.
          try? FileManager.default.removeItem(atPath: childResult)
          guard ScenarioProcess.handOver(encoded) else {
            ScenarioProcess.failInChild(
              "cannot write the scenario's result to \(childResult): \(ReportWriter.describe(error))",
              resultPath: childResult)
          }
        }
        return [report]
      }
      // Read before the folder is emptied: --baseline may name the report this run replaces.
      let stored = try baseline.map {
        try BaselineSource(path: $0).report(for: try setup(of: scenario), tolerances: tolerances.tolerances())
      }
      let folder = try ReportFolder(directory: options.output, scenario: scenario.name, variant: variant.rawValue)
      var report: Report
      if options.inProcess {
        let blame = InProcessBlame()
        runner.interruptions = blame
        report = runner.run(scenario, variant: variant, iterations: iterations)
        if let failure = blame.failure {
          throw HarnessError("perfharness failed running \(scenario.name), not the scenario: \(failure)")
        }
      } else {
        report = try ScenarioProcess(options: options).run(
          scenario, variant: variant, iterations: iterations, in: folder)
      }
      try checks.judge(&report, named: scenario.name, baseline: stored, tolerances: try tolerances.tolerances())
      // The figures are printed even when the files cannot be written, then the run stops.
      var writeFailure: (any Error)?
      var files: ReportWriter.Written?
      do {
        files = try ReportWriter(directory: options.output).write(report, into: folder)
      } catch {
        writeFailure = error
      }
      switch options.format {
      case .text:
        print(
          TerminalText.lines(RunSummaryText.render(report, reportPath: files?.json, pagePath: files?.page)),
          terminator: "")
      case .json:
        let line = try ReportJSON.encode(report, pretty: false)
        print(String(decoding: line, as: UTF8.self))
      case .markdown:
        print(MarkdownSummary.render(report, reportPath: files?.json, pagePath: files?.page), terminator: "")
      }
      if let writeFailure { throw writeFailure }
      withExtendedLifetime(folder) {}
      reports.append(report)
      written.append((report, "\(report.scenario.name)/\(report.scenario.variant)"))
      // The run so far is written; the person who pressed Ctrl-C wants no more.
      if CPerfCrash_interruption() != 0 { break }
    }
    // One page that links every report of this run, its path printed last: the one line a
    // person needs to open what the run found.
    try ReportWriter(directory: options.output).writeIndex(written, format: options.format)
    return reports
  }
}

/// With --in-process: a failure of the harness's own work is exit 1, as in a child.
@MainActor
private final class InProcessBlame: ScenarioInterruptions {
  var failure: String?
  func scenarioWillStart(_ partialReport: PartialReport) {}
  func scenarioDidEnd() {}
  func harnessFailed(_ reason: String) { failure = reason }
}

/// Progress lines go to stderr, and only when a person is watching it.
enum Progress {
  static func report(_ message: String) {
    guard isatty(STDERR_FILENO) != 0 else { return }
    FileHandle.standardError.write(Data("perfharness: \(message)\n".utf8))
  }
}
