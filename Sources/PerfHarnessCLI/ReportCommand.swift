import ArgumentParser
import Foundation
import PerfHarness
import PerfReports

struct ReportCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "report",
    abstract: "Show a stored JSON report's call tree, render it as HTML and export its profile.",
    discussion: """
      --call-tree takes a comma-separated list of Instruments' Call Tree options: \
      \(CallTreeOptions.optionNames.joined(separator: ", ")) (or "none").
      """)

  @Argument(help: ArgumentHelp("A report.json written by 'perfharness scenario'.", valueName: "file.json"))
  var file: String

  @Option(help: ArgumentHelp("Call Tree options, comma-separated.", valueName: "options"))
  var callTree: String = "hide-system-libraries"

  @Option(help: "How deep the printed call tree goes.")
  var depth: Int = 14

  @Option(help: ArgumentHelp("Hide rows below this percentage of the total.", valueName: "percent"))
  var minPercent: Double = 1

  @Option(
    help: ArgumentHelp(
      "Show only allocation categories whose name contains this (case-insensitive).", valueName: "text"))
  var filter: String?

  @Option(
    help: ArgumentHelp(
      "Why is it still alive: the shortest paths from a root to this type's instances (needs the leaks instrument).",
      valueName: "type"))
  var retainers: String?

  @Option(
    help: ArgumentHelp(
      "Write the self-contained HTML report here (what 'scenario' writes as report.html).", valueName: "path"))
  var html: String?

  @Option(help: ArgumentHelp("Write folded stacks (flamegraph.pl input) here.", valueName: "path"))
  var folded: String?

  @Option(help: ArgumentHelp("Write a speedscope profile here.", valueName: "path"))
  var speedscope: String?

  @Option(
    help: ArgumentHelp(
      "Write the CPU profile as pprof (profile.pb.gz: go tool pprof, Pyroscope, Parca) into this folder.",
      valueName: "dir"))
  var pprof: String?

  @Option(
    help: ArgumentHelp(
      "Write every export a run writes beside its report (folded stacks, speedscope, pprof, leak cycles as DOT) into this folder.",
      valueName: "dir"))
  var export: String?

  mutating func validate() throws {
    guard !CommandLineParsing.validationDeferred else { return }
    _ = try parsedOptions()
    guard depth > 0 else { throw ValidationError("--depth must be a positive integer, got \(depth)") }
    guard (0...100).contains(minPercent) else {
      throw ValidationError("--min-percent must be between 0 and 100, got \(minPercent)")
    }
  }

  func parsedOptions() throws -> CallTreeOptions {
    do {
      return try CallTreeOptions(parsing: callTree)
    } catch {
      let accepted = CallTreeOptions.optionNames
      throw ValidationError(
        "--call-tree: unknown call tree option '\(error.word)'; \(Suggestion.didYouMean(error.word, among: accepted))"
          + "accepted: a comma-separated list of \(accepted.joined(separator: ", ")), or none")
    }
  }

  func run() throws {
    let report = try readReport()
    // A question about one type gets its answer alone, not after the whole summary.
    if let retainers {
      print(TerminalText.lines(try Self.retainersText(of: retainers, in: report, file: file)), terminator: "")
      return
    }
    var summary = report
    if filter != nil { summary.allocations = nil }
    print(TerminalText.lines(RunSummaryText.render(summary, reportPath: nil)), terminator: "")
    if let filter, let allocations = report.allocations {
      print(TerminalText.lines(AllocationsText.render(allocations, categoryLimit: 50, filter: filter)), terminator: "")
    }
    if let pprof {
      let written = try writeExports(of: report, kinds: [.pprof], into: pprof)
      guard written > 0 else {
        throw ValidationError(
          "--pprof: \(file) has neither a time profile nor allocation stacks (record with --instruments time or allocations)"
        )
      }
    }
    if let export {
      guard try writeExports(of: report, kinds: Set(ReportExport.Kind.allCases), into: export) > 0 else {
        throw ValidationError(
          "--export: \(file) has nothing to export: no time profile, allocation stacks or leak cycles")
      }
    }
    guard let timeProfile = report.timeProfile else {
      print("No time profile in \(file): the run did not record with --instruments time.")
      return
    }
    let options = try parsedOptions()
    let tree = CallTree(
      profile: timeProfile.profile, options: options,
      pruning: CallTreePruning(minimumFraction: minPercent / 100, maxDepth: depth))
    print(
      "Call tree (\(options.enabledOptionNames.isEmpty ? "no options" : options.enabledOptionNames.joined(separator: ", "))):"
    )
    print(TerminalText.lines(CallTreeText.render(tree, maxDepth: depth, minPercent: minPercent)), terminator: "")
    if let folded {
      try write(Data(FoldedStacks.render(timeProfile.profile, options: options).utf8), to: folded)
    }
    if let speedscope {
      let name = "\(report.scenario.name) [\(report.scenario.variant)]"
      try write(Speedscope.render(timeProfile.profile, name: name), to: speedscope)
    }
  }

  /// The report, and its HTML page when asked. The page embeds the file's own JSON, not a
  /// re-encoding (keys this model does not know still render); those bytes are kept only
  /// while it is written, not through the call tree and exports.
  private func readReport() throws -> Report {
    guard let html else { return try StoredReport.read(file) }
    let (report, json) = try StoredReport.readWithJSON(file)
    try write(
      Data(
        HTMLReport.render(reportJSON: json, title: HTMLReport.title(of: report), findings: Findings.of(report)).utf8),
      to: html)
    return report
  }

  /// Writes the exports of `kinds` (``ReportExport/all``) into `folder`; returns how many files.
  private func writeExports(of report: Report, kinds: Set<ReportExport.Kind>, into folder: String) throws -> Int {
    let files = try ReportExport.all.filter { kinds.contains($0.kind) }.flatMap { try $0.files(report) }
    guard !files.isEmpty else { return 0 }
    do {
      try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    } catch {
      throw HarnessError("cannot create the folder \(folder): \(error.localizedDescription)")
    }
    for file in files { try write(file.contents, to: folder + "/" + file.name) }
    return files.count
  }

  static func retainersText(of type: String, in report: Report, file: String) throws -> String {
    guard let leaks = report.leaks else {
      throw ValidationError(
        "--retainers needs the leaks instrument: \(file) was recorded without it (record with --instruments time,allocations,leaks)"
      )
    }
    guard leaks.retainers != nil else {
      throw ValidationError("--retainers: \(file) was written by a perfharness that did not keep retainer paths")
    }
    var lines: [String] = []
    // Leaked instances first: nothing reachable holds them, so no path does either.
    if let leaked = leaks.leaked(type) { lines += leaked.textLines(type: type) }
    let matched = leaks.retainers(of: type)
    if !matched.isEmpty {
      lines.append("Retainers (shortest paths from a root):")
      lines += matched.flatMap { $0.textLines() }.map { "  " + $0 }
    }
    if !lines.isEmpty { return lines.joined(separator: "\n") + "\n" }
    let known = Self.typeNames(in: report)
    // The report keeps the paths of a limited number of types: past it, absence says nothing.
    if (leaks.retainers ?? []).count >= LeaksReport.retainerTypeLimit {
      return
        "Retainers: \(type) is not among the \((leaks.retainers ?? []).count) types whose paths the report kept (the program's own first)\n"
    }
    if known.contains(where: { LeaksReport.names($0, type) }) {
      return "Retainers: no instance of \(type) allocated while recording is alive at its end, and none leaked\n"
    }
    let suggestions = known.filter { $0.localizedCaseInsensitiveContains(type) }.prefix(5)
    throw ValidationError(
      "--retainers: \(file) has no type named \(type)"
        + (suggestions.isEmpty ? "" : "; did you mean \(suggestions.joined(separator: ", "))?")
        + " (accepted: a type as the report names it, with or without its module, e.g. Cache or App.Cache)")
  }

  /// Every type the report names: its allocation categories, leaked types and retainers.
  private static func typeNames(in report: Report) -> [String] {
    var names = (report.allocations?.categories ?? []).map(\.name)
    if let leaks = report.leaks {
      names +=
        leaks.cycles.flatMap { $0.nodes.map(\.type) } + leaks.rootLeaks.map(\.type)
        + leaks.indirectLeaks.map(\.type) + (leaks.retainers ?? []).map(\.type)
    }
    var seen = Set<String>()
    return names.filter { seen.insert($0).inserted }
  }

  private func write(_ data: Data, to path: String) throws {
    do {
      try data.write(to: URL(fileURLWithPath: path), options: .atomic)
    } catch {
      throw HarnessError("cannot write \(path): \(error.localizedDescription)")
    }
  }
}

/// Reading a report someone hands us: every failure names the file and what was expected.
enum StoredReport {
  static func read(_ path: String) throws -> Report {
    try readWithJSON(path).report
  }

  /// - Returns: the decoded report and the file's bytes.
  static func readWithJSON(_ path: String) throws -> (report: Report, json: Data) {
    let data: Data
    do {
      data = try BoundedFile.read(path, limit: BoundedFile.reportLimit)
    } catch let error as BoundedFile.TooLarge {
      throw HarnessError("cannot read the report \(error)")
    } catch let error as BoundedFile.NotARegularFile {
      throw HarnessError("cannot read the report \(path): it is \(error.kind); accepted: a report.json, a regular file")
    } catch {
      throw HarnessError("cannot read the report \(path): \(error.localizedDescription)")
    }
    do {
      return (try ReportJSON.decode(data), data)
    } catch let error as ReportJSON.OtherVersion {
      guard let version = error.version else {
        throw HarnessError("\(path) is not a perfharness report: it has no schemaVersion")
      }
      throw HarnessError(
        "\(path) has schemaVersion \(version); this perfharness reads schemaVersion \(Report.currentSchemaVersion)")
    } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
      // Only the parse fails at the root: every check of ReportJSON names a path.
      let reason = context.underlyingError.map { "\(context.debugDescription) \($0)" } ?? context.debugDescription
      throw HarnessError("\(path) is not JSON (truncated or corrupt?): \(reason)")
    } catch {
      throw HarnessError("\(path) is not a valid schemaVersion 1 report: \(describe(error))")
    }
  }

  private static func describe(_ error: any Error) -> String {
    switch error {
    case DecodingError.keyNotFound(let key, let context):
      return "missing key '\((context.codingPath + [key]).map(\.stringValue).joined(separator: "."))'"
    case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context),
      DecodingError.dataCorrupted(let context):
      return
        "bad value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))': \(context.debugDescription)"
    default:
      return "\(error)"
    }
  }
}
