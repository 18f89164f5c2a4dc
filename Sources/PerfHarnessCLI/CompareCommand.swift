import ArgumentParser
import Foundation
import PerfHarness
import PerfReports

struct CompareCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "compare",
    abstract: "Compare a report with a stored baseline; exit 2 when a figure grew beyond the tolerance.",
    discussion: """
      Gated: persistent bytes and blocks, total allocations, the largest generation growth \
      after the first, # Persistent of each Swift type, leaked bytes and retain cycles. Wall, \
      sampled and step times are shown, and gated only with --time-tolerance; the peak heap \
      is shown, and gated only with --peak-tolerance.
      """)

  @Argument(help: ArgumentHelp("The baseline report.json.", valueName: "base.json"))
  var base: String

  @Argument(help: ArgumentHelp("The report.json to check against it.", valueName: "new.json"))
  var new: String

  @OptionGroup var tolerances: ComparisonOptions

  @Option(
    help: "text: a table on stdout (default); json: the comparison as JSON; markdown: a table for a pull request.",
    transform: Suggestion.value(of: OutputFormat.self))
  var format: OutputFormat = .text

  @Option(
    help: ArgumentHelp(
      "Write NEW's HTML report here with the comparison: its flame graphs coloured by the change from BASE.",
      valueName: "path"))
  var html: String?

  mutating func validate() throws {
    guard !CommandLineParsing.validationDeferred else { return }
    _ = try tolerances.tolerances()
  }

  func run() throws {
    let baseline = try StoredReport.read(base)
    let current = try StoredReport.read(new)
    try BaselineSource.refuseIncomplete(baseline, file: base, flag: "compare")
    let tolerances = try tolerances.tolerances()
    try BaselineSource.refuseIncomparable(
      baseline, file: base, flag: "compare", run: current.scenario, runName: new, tolerances: tolerances)
    let comparison = BaselineComparison.compare(current, with: baseline, baselinePath: base, tolerances: tolerances)
    if let html {
      var compared = current
      compared.comparison = comparison
      // The page judges NEW by the comparison, as `--baseline` would have.
      compared.checked = comparison.judgedAnything
      if compared.status == .passed && !comparison.passed { compared.status = .failed }
      compared.notGated = compared.ungatedFigures()
      do {
        let page = try HTMLReport.render(compared)
        try Data(page.utf8).write(to: URL(fileURLWithPath: html), options: .atomic)
      } catch {
        throw HarnessError("cannot write \(html): \(ReportWriter.describe(error))")
      }
    }
    switch format {
    case .text:
      print("\(current.scenario.name) [\(current.scenario.variant)] in \(new)")
      print(TerminalText.lines(ComparisonText.render(comparison)), terminator: "")
    case .markdown:
      print("### \(current.scenario.name) [\(current.scenario.variant)] against its baseline\n")
      print(MarkdownSummary.comparison(comparison), terminator: "")
    case .json:
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
      print(String(decoding: try encoder.encode(comparison), as: UTF8.self))
    }
    if !comparison.passed { throw ExitCodes.checkFailed }
  }
}
