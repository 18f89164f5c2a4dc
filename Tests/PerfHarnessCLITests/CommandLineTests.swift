import Foundation
import PerfHarness
import Testing

@testable import PerfHarnessCLI

@Suite("perfharness command line, through the built binary")
struct CommandLineTests {
  let perfharness = try! BuiltBinary("perfharness")

  @Test("list names every scenario with its variants")
  func list() throws {
    let result = try perfharness.run(["list"])
    #expect(result.status == 0)
    for name in ["filtered-thumbnail-scrolling", "search-drill-downs", "closure-retain-cycles"] {
      #expect(result.standardOutput.contains(name))
    }
    #expect(result.standardOutput.contains("variants: starter, fixed"))
    // Each scenario's own instruments: the retain-cycle scenario needs the memory graph.
    let lines = result.standardOutput.split(separator: "\n").map(String.init)
    let cycles = try #require(lines.firstIndex { $0.contains("closure-retain-cycles") })
    #expect(lines[cycles + 1].hasSuffix("instruments: time,allocations,leaks"), "\(lines[cycles + 1])")
    let drillDowns = try #require(lines.firstIndex { $0.contains("search-drill-downs") })
    #expect(lines[drillDowns + 1].hasSuffix("instruments: time,allocations"), "\(lines[drillDowns + 1])")
  }

  /// What `make run` does: every scenario, the instruments each declares, and each opens
  /// with the tutorial's finding.
  @Test("the default run of every scenario leads with the tutorial's three findings")
  func threeFindings() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let run = try perfharness.run(["scenario", "--iterations", "2", "--output", directory.path])
    #expect(run.status == 0, "\(run.standardError)")
    var blocks: [String: [String]] = [:]
    var current = ""
    for line in run.standardOutput.split(separator: "\n").map(String.init) {
      if !line.hasPrefix(" "), let name = line.split(separator: " ").first, line.contains(" [starter, ") {
        current = String(name)
      }
      blocks[current, default: []].append(line)
    }
    let filtering = blocks["filtered-thumbnail-scrolling"] ?? []
    #expect(
      filtering.contains {
        $0.hasPrefix("    · Heaviest program function: ") && $0.contains("applyTonalFilter")
          && $0.contains("Main Thread")
      }, "\(filtering.prefix(6))")
    let drillDowns = blocks["search-drill-downs"] ?? []
    #expect(
      drillDowns.contains { $0.hasPrefix("    ! ") && $0.contains("generations after the first grew") },
      "\(drillDowns.prefix(6))")
    let cycles = blocks["closure-retain-cycles"] ?? []
    #expect(cycles.contains { $0.hasPrefix("    ! ") && $0.contains("retain cycle") }, "\(cycles.prefix(6))")
    #expect(run.standardOutput.split(separator: "\n").last == "index: \(directory.path)/index.html")
  }

  @Test("a scenario records the instruments it declares; --instruments replaces them")
  func declaredInstruments() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    func instruments(_ extra: [String]) throws -> [String] {
      let run = try perfharness.run(
        ["scenario", "closure-retain-cycles", "--iterations", "1", "--output", directory.path] + extra)
      #expect(run.status == 0, "\(run.standardError)")
      if extra.isEmpty {
        // The summary opens with what the run found: the cycle the tutorial is about, by type.
        let lines = run.standardOutput.split(separator: "\n").map(String.init)
        #expect(lines.count > 4 && lines[1] == "  Findings:", "\(lines.prefix(3))")
        #expect(lines.contains { $0.hasPrefix("    · Heaviest program function: ") })
        #expect(
          lines.contains { $0.hasPrefix("    ! ") && $0.contains("leaked blocks") && $0.contains("1 retain cycle × 1") }
        )
        #expect(lines.contains { $0.contains("cycle × 1: ") && $0.contains("closure context") })
      }
      let report = try JSONSerialization.jsonObject(
        with: Data(contentsOf: directory.appendingPathComponent("closure-retain-cycles/starter/report.json")))
      let scenario = (report as? [String: Any])?["scenario"] as? [String: Any]
      #expect((report as? [String: Any])?["leaks"] != nil || !extra.isEmpty)
      return scenario?["instruments"] as? [String] ?? []
    }
    #expect(try instruments([]) == ["time", "allocations", "leaks"])
    #expect(try instruments(["--instruments", "time"]) == ["time"])
  }

  @Test(
    "bad input exits 64 and names the input and the accepted forms",
    arguments: [
      (["scenario", "no-such-scenario"], ["no-such-scenario", "closure-retain-cycles"]),
      (["scenario", "closure-retain-cycles", "--variant", "golden"], ["golden", "starter, fixed"]),
      (["scenario", "closure-retain-cycles", "--iterations", "0"], ["--iterations", "positive"]),
      (["scenario", "closure-retain-cycles", "--iterations", "many"], ["many"]),
      (["scenario", "closure-retain-cycles", "--format", "xml"], ["xml", "text", "json"]),
      (["scenario", "closure-retain-cycles", "--sample-rate", "0"], ["--sample-rate", "1 and 10000"]),
      (["scenario", "closure-retain-cycles", "--sample-rate", "1000000"], ["1000000"]),
      (["scenario", "closure-retain-cycles", "--instruments", "time,cpu"], ["cpu", "time, allocations, leaks"]),
      (["scenario", "--no-such-flag"], ["--no-such-flag"]),
      (["scenario", "search-drill-downs", "--leak-check-at-marks"], ["--leak-check-at-marks", "leaks"]),
      (
        ["scenario", "search-drill-downs", "--leak-check-at-marks", "--instruments", "time"],
        ["--leak-check-at-marks", "leaks"]
      ),
      (
        ["scenario", "closure-retain-cycles", "--check", "--min-coverage", "120%"],
        ["--min-coverage", "120%", "0 to 100"]
      ),
      (["frobnicate"], ["frobnicate"]),
    ])
  func badInput(arguments: [String], mentions: [String]) throws {
    let result = try perfharness.run(arguments)
    #expect(result.status == 64, "\(arguments): \(result.standardError)")
    for text in mentions {
      #expect(result.standardError.contains(text), "stderr should mention \(text): \(result.standardError)")
    }
    #expect(result.standardOutput.isEmpty)
  }

  /// ArgumentParser validates before it looks for unknown options: the value of a mistyped
  /// option was read as a scenario name and blamed ("unknown scenario 'leaks'").
  @Test(
    "an unknown option is named, with the option it resembles, before any argument is read as a name",
    arguments: [
      (["scenario", "closure-retain-cycles", "--instrument", "leaks"], "--instrument", "--instruments"),
      (["scenario", "--variant", "golden", "--iteration", "2"], "--iteration", "--iterations"),
      (["record", "--mark-evry", "1", "--", "/no/such/program"], "--mark-evry", "--mark-every"),
    ])
  func unknownOptionFirst(arguments: [String], unknown: String, suggested: String) throws {
    let result = try perfharness.run(arguments)
    #expect(result.status == 64, "\(arguments): \(result.standardError)")
    let firstLine = result.standardError.split(separator: "\n").first.map(String.init) ?? ""
    #expect(firstLine == "Error: Unknown option '\(unknown)'. Did you mean '\(suggested)'?", "\(result.standardError)")
    #expect(result.standardOutput.isEmpty)
  }

  @Test(
    "a mistyped name or value gets the nearest accepted form and the whole list",
    arguments: [
      (
        ["scenario", "closure-retain-cycle"],
        "unknown scenario 'closure-retain-cycle'; did you mean 'closure-retain-cycles'? the scenarios are: "
      ),
      (
        ["reprot", "x.json"],
        "unknown subcommand 'reprot'; did you mean 'report'? accepted: list, scenario, record, report, compare"
      ),
      (
        ["scenario", "closure-retain-cycles", "--instruments", "time,leak"],
        "did you mean 'leaks'? accepted: time, allocations, leaks, comma-separated, or none"
      ),
      (["scenario", "closure-retain-cycles", "--variant", "fixd"], "did you mean 'fixed'? accepted: starter, fixed"),
      (["scenario", "--format", "jsn"], "did you mean 'json'? accepted: text, json, markdown"),
      (
        ["compare", "a.json", "b.json", "--format", "markdwn"],
        "did you mean 'markdown'? accepted: text, json, markdown"
      ),
      (["record", "--clock", "wal", "--", "/bin/true"], "did you mean 'wall'? accepted: cpu, wall"),
      (
        ["report", "x.json", "--call-tree", "invrt"],
        "unknown call tree option 'invrt'; did you mean 'invert'? accepted: a comma-separated list of "
      ),
      // Nothing near: the list alone, no guess.
      (["frobnicate"], "unknown subcommand 'frobnicate'; accepted: list, scenario, record, report, compare"),
      (["scenario", "--format", "xml"], "'--format <format>': accepted: text, json, markdown"),
    ])
  func didYouMean(arguments: [String], message: String) throws {
    let result = try perfharness.run(arguments)
    #expect(result.status == 64, "\(arguments): \(result.standardError)")
    #expect(result.standardError.contains(message), "\(result.standardError)")
    #expect(result.standardOutput.isEmpty)
  }

  @Test("a scenario run prints a summary and writes its report under --output")
  func runWritesReport() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "scenario", "closure-retain-cycles", "--variant", "fixed", "--iterations", "2",
      "--output", directory.path,
    ])
    #expect(result.status == 0, "\(result.standardError)")
    // Nothing judged the run: it finished, which is not the same as passing.
    #expect(result.standardOutput.contains("closure-retain-cycles [fixed, 2 iterations]: no checks"))
    #expect(result.standardOutput.contains("No checks ran"))
    #expect(result.standardError.isEmpty, "no progress on stderr when it is not a terminal")
    // The page a person opens is printed beside the JSON, and is there.
    let printed = result.standardOutput.split(separator: "\n").map(String.init)
    let page = try #require(printed.first { $0.hasPrefix("  html:   ") }?.dropFirst(10), "\(printed.suffix(4))")
    #expect(page.hasSuffix("/closure-retain-cycles/fixed/report.html"))
    #expect(FileManager.default.fileExists(atPath: String(page)))
    #expect(printed.contains { $0.hasPrefix("  report: ") && $0.hasSuffix("/closure-retain-cycles/fixed/report.json") })
    // The Time Profiler names its source, and each thread's row its own rate and coverage.
    let lines = result.standardOutput.split(separator: "\n")
    #expect(lines.contains { $0.hasPrefix("    source: ") && $0.contains("samples per CPU second") })
    #expect(
      lines.contains { $0.hasPrefix("    Main Thread") && $0.contains(" /CPU s, coverage ") },
      "\(lines.filter { $0.contains("Main Thread") })")
    let reportURL = directory.appendingPathComponent("closure-retain-cycles/fixed/report.json")
    let report = try JSONSerialization.jsonObject(with: Data(contentsOf: reportURL)) as? [String: Any]
    #expect(report?["schemaVersion"] as? Int == 1)
    let scenario = report?["scenario"] as? [String: Any]
    #expect(scenario?["name"] as? String == "closure-retain-cycles")
    #expect(scenario?["variant"] as? String == "fixed")
    #expect(scenario?["iterations"] as? Int == 2)
    #expect(report?["status"] as? String == "passed")
    #expect(report?["checked"] as? Bool == false)
    let steps = report?["steps"] as? [[String: Any]] ?? []
    #expect(steps.map { $0["name"] as? String } == ["search", "drill in, toggle hearts, back"])
    #expect(steps.last?["count"] as? Int == 2)
  }

  @Test("--format json prints one report per line and nothing else")
  func jsonLines() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "scenario", "closure-retain-cycles", "closure-retain-cycles", "--iterations", "1", "--format", "json",
      "--output", directory.path,
    ])
    #expect(result.status == 0)
    let lines = result.standardOutput.split(separator: "\n")
    #expect(lines.count == 2)
    for line in lines {
      let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
      #expect(object?["status"] as? String == "passed")
    }
  }

  @Test("an output directory that cannot be written exits 1 and names it")
  func unwritableOutput() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let blocker = directory.appendingPathComponent("file")
    try Data("x".utf8).write(to: blocker)
    let result = try perfharness.run([
      "scenario", "closure-retain-cycles", "--iterations", "1", "--output", blocker.path,
    ])
    #expect(result.status == 1)
    #expect(result.standardError.contains(blocker.path))
  }
}

/// The synopsis lives once, in the guide's getting started; `--help` is generated from the
/// code. Each command's options there and in its `--help` must be the same set.
@Suite("The documented synopsis and --help")
struct SynopsisTests {
  let perfharness = try! BuiltBinary("perfharness")
  static let guide = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("Sources/PerfHarness/PerfHarness.docc/GettingStarted.md")

  private static func options(in text: Substring) -> Set<String> {
    Set(text.matches(of: /--[a-z][a-z-]*/).map { String($0.output) }).subtracting(["--help", "--version"])
  }

  /// Each command's options in the guide's "Using it" code blocks: a line `perfharness NAME`
  /// starts a command, indented lines continue it, and the gating block belongs to the
  /// commands that say they take it.
  private static func documentedOptions() throws -> [String: Set<String>] {
    let text = try String(contentsOf: guide, encoding: .utf8)
    let start = try #require(text.range(of: "## Using it"))
    let section = text[start.upperBound...]
    let end = section.range(of: "\n## ")?.lowerBound ?? section.endIndex
    let blocks = section[..<end].components(separatedBy: "```").enumerated().filter { $0.offset % 2 == 1 }
    var options: [String: Set<String>] = [:]
    var gating: Set<String> = []
    var takesGating: Set<String> = ["scenario"]
    for block in blocks.map(\.element) where !block.hasPrefix("sh") {
      var command: String?
      for line in block.split(separator: "\n") {
        if line.hasPrefix("perfharness ") { command = String(line.split(separator: " ")[1]) }
        if let command, line.contains("gating options") { takesGating.insert(command) }
        if let command {
          options[command, default: []].formUnion(Self.options(in: line))
        } else {
          gating.formUnion(Self.options(in: line))
        }
      }
    }
    for command in takesGating { options[command]?.formUnion(gating) }
    return options
  }

  @Test("every command's options in the guide are those of its --help, no more, no fewer")
  func guideAgreesWithHelp() throws {
    let documented = try Self.documentedOptions()
    #expect(Set(documented.keys) == ["list", "scenario", "record", "report", "compare"], "\(documented.keys)")
    for (command, options) in documented {
      let help = try perfharness.run([command, "--help"])
      #expect(help.status == 0)
      let actual = Self.options(in: help.standardOutput[...])
      #expect(
        actual.subtracting(options).isEmpty, "\(command): not in the guide: \(actual.subtracting(options).sorted())")
      #expect(options.subtracting(actual).isEmpty, "\(command): not in --help: \(options.subtracting(actual).sorted())")
    }
  }
}

/// `scenario` and `record` share their options; each one's help speaks of what it records.
@Suite("Each command's --help in its own words")
struct HelpWordsTests {
  let perfharness = try! BuiltBinary("perfharness")

  @Test(
    "record --help speaks of the program, scenario --help of scenarios",
    arguments: [
      (
        "record",
        [
          "(default: time,allocations,leaks)", "Evaluate the program's thresholds", "one <executable name>.yaml each",
          "a summary of the program's run",
        ],
        ["each scenario declares", "the scenario's thresholds", "<scenario>.yaml", "per scenario"]
      ),
      (
        "scenario",
        [
          "(default: what each scenario declares; see 'list')", "Evaluate the scenario's thresholds",
          "one <scenario>.yaml each", "a summary per scenario",
        ],
        ["the program's"]
      ),
    ])
  func ownWords(command: String, says: [String], neverSays: [String]) throws {
    let help = try perfharness.run([command, "--help"])
    #expect(help.status == 0)
    // Unwrapped: ArgumentParser breaks lines at the terminal's width.
    let text = help.standardOutput.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    for phrase in says { #expect(text.contains(phrase), "\(command) --help should say \(phrase)") }
    for phrase in neverSays { #expect(!text.contains(phrase), "\(command) --help should not say \(phrase)") }
  }
}

@Suite("The guide's example of a user's own scenario package (Examples/CustomScenarios)")
struct ExampleExecutableTests {
  @Test("gets the same CLI for its own scenarios")
  func sameCommandLine() throws {
    let example = try BuiltBinary("perfharness-example")
    let list = try example.run(["list"])
    #expect(list.status == 0)
    #expect(list.standardOutput.contains("inventory-restocking"))
    #expect(!list.standardOutput.contains("closure-retain-cycles"))

    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let run = try example.run(["scenario", "--iterations", "2", "--output", directory.path])
    #expect(run.status == 0, "\(run.standardError)")
    #expect(run.standardOutput.contains("inventory-restocking [starter, 2 iterations]: no checks"))
    #expect(run.standardOutput.contains("Restock 2"))
    let unknown = try example.run(["scenario", "search-drill-downs"])
    #expect(unknown.status == 64)
    #expect(unknown.standardError.contains("inventory-restocking"))
    // Usage names the executable the user ran, not this package's.
    #expect(unknown.standardError.contains("Usage: perfharness-example scenario"), "\(unknown.standardError)")
  }
}

@Suite("perfharness report")
struct ReportCommandTests {
  let perfharness = try! BuiltBinary("perfharness")

  @Test("prints the call tree with the chosen options and writes the exports")
  func callTreeAndExports() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let run = try perfharness.run([
      "scenario", "closure-retain-cycles", "--iterations", "2", "--output", directory.path,
    ])
    #expect(run.status == 0)
    let report = directory.appendingPathComponent("closure-retain-cycles/starter/report.json").path
    let folded = directory.appendingPathComponent("out.folded").path
    let speedscope = directory.appendingPathComponent("out.speedscope.json").path
    let pprof = directory.appendingPathComponent("pprof")
    let result = try perfharness.run([
      "report", report, "--call-tree", "invert,hide-system-libraries", "--folded", folded, "--speedscope", speedscope,
      "--pprof", pprof.path,
    ])
    #expect(result.status == 0, "\(result.standardError)")
    #expect(result.standardOutput.contains("Call tree (invert, hide-system-libraries):"))
    let foldedText = try String(contentsOfFile: folded, encoding: .utf8)
    // Every line is `frames count`, with a positive count.
    for line in foldedText.split(separator: "\n") {
      let count = line.split(separator: " ").last.flatMap { Int($0) }
      #expect((count ?? 0) > 0, "\(line)")
    }
    let speedscopeObject =
      try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: speedscope))) as? [String: Any]
    #expect(speedscopeObject?["$schema"] as? String == "https://www.speedscope.app/file-format-schema.json")
    // pprof, from the stored report and beside it from the run, the same bytes (gzip's magic).
    let exported = try Data(contentsOf: pprof.appendingPathComponent("profile.pb.gz"))
    let written = try Data(
      contentsOf: directory.appendingPathComponent("closure-retain-cycles/starter/profile.pb.gz"))
    #expect(exported.prefix(2) == Data([0x1F, 0x8B]) && exported == written)
    // What was live at the end by allocation stack: heap.pb.gz both ways, and the folded
    // stacks add up to the bytes of the stacks the report keeps.
    let heap = try Data(contentsOf: pprof.appendingPathComponent("heap.pb.gz"))
    #expect(
      heap == (try Data(contentsOf: directory.appendingPathComponent("closure-retain-cycles/starter/heap.pb.gz"))))
    let stored = try JSONDecoder().decode(Report.self, from: Data(contentsOf: URL(fileURLWithPath: report)))
    let stacks = try #require(stored.allocations?.persistentStacks)
    let allocationsFolded = try String(
      contentsOf: directory.appendingPathComponent("closure-retain-cycles/starter/allocations.folded"), encoding: .utf8)
    var foldedBytes = 0
    for line in allocationsFolded.split(separator: "\n") {
      foldedBytes += line.split(separator: " ").last.flatMap { Int($0) } ?? 0
    }
    let stackBytes = stacks.reduce(0) { $0 + $1.bytes }
    #expect(!stacks.isEmpty && foldedBytes == stackBytes)
    #expect(stackBytes <= stored.allocations?.totals.persistentBytes ?? 0)
  }

  @Test(
    "a missing, corrupt, truncated or wrong-version report exits 1 and names the file",
    arguments: [
      ("missing", nil, "cannot read"),
      ("corrupt", "this is not json", "is not JSON"),
      ("truncated", #"{"schemaVersion": 1, "tool": {"na"#, "is not JSON"),
      ("version", #"{"schemaVersion": 99}"#, "schemaVersion 99"),
      ("unversioned", #"{"hello": 1}"#, "no schemaVersion"),
      ("incomplete", #"{"schemaVersion": 1}"#, "missing key"),
    ] as [(String, String?, String)])
  func badReports(name: String, content: String?, message: String) throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let file = directory.appendingPathComponent("\(name).json")
    if let content { try Data(content.utf8).write(to: file) }
    let result = try perfharness.run(["report", file.path])
    #expect(result.status == 1)
    #expect(result.standardError.contains(file.path), "\(result.standardError)")
    #expect(result.standardError.contains(message), "\(result.standardError)")
  }

  @Test("--filter narrows the allocation categories, like Instruments' filter field")
  func filter() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    _ = try perfharness.run(["scenario", "closure-retain-cycles", "--iterations", "2", "--output", directory.path])
    let report = directory.appendingPathComponent("closure-retain-cycles/starter/report.json").path
    let result = try perfharness.run(["report", report, "--filter", "viewcontroller"])
    #expect(result.status == 0)
    let rows = result.standardOutput.split(separator: "\n").drop { !$0.contains("Categories matching") }.dropFirst(2)
      .prefix { $0.hasPrefix("    ") && !$0.contains("Generations") }
    #expect(!rows.isEmpty)
    #expect(rows.allSatisfy { $0.lowercased().contains("viewcontroller") }, "\(rows)")
    #expect(rows.contains { $0.contains("PhotoSearch.SearchResultsViewController") && $0.contains(" 2 ") })
  }

  @Test("unknown call tree options exit 64 with the accepted forms")
  func badOptions() throws {
    let result = try perfharness.run(["report", "whatever.json", "--call-tree", "invert,sideways"])
    #expect(result.status == 64)
    #expect(result.standardError.contains("sideways"))
    #expect(result.standardError.contains("flatten-recursion"))
  }

  /// The child process records with the configuration the parent built, handed over whole
  /// in one file: every setting given on the command line shows in its report.
  @Test("every recording setting reaches the scenario's child process")
  func childRecordsWithEverySetting() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let suppressions = directory.appendingPathComponent("suppressions.txt")
    try "type:*\n".write(to: suppressions, atomically: true, encoding: .utf8)
    let output = directory.appendingPathComponent("reports")
    let run = try perfharness.run([
      "scenario", "closure-retain-cycles", "--iterations", "2", "--instruments", "time,allocations,leaks",
      "--sample-rate", "250", "--clock", "wall", "--no-allocation-stacks", "--memory-warning", "--leak-check-at-marks",
      "--suppressions", suppressions.path, "--output", output.path,
    ])
    #expect(run.status == 0, "\(run.standardError)")
    let folder = output.appendingPathComponent("closure-retain-cycles/starter")
    let report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: folder.appendingPathComponent("report.json")))
    #expect(report.scenario.instruments == [.time, .allocations, .leaks])
    #expect(report.timeProfile?.sampleRateHz == 250)
    #expect(report.timeProfile?.clock == "wall")
    #expect(report.allocations?.mode == "countsOnly")
    #expect(report.marks.last?.isMemoryWarning == true)
    #expect(report.leaks?.checks?.isEmpty == false)
    #expect((report.leaks?.suppressedCount ?? 0) > 0)
    #expect(report.leaks?.leakedCount == 0)
    // The hand-over files are the harness's own: none is left beside the report.
    let left = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter {
      $0.hasPrefix(".perfharness") && $0 != ReportFolder.manifestName
    }
    #expect(left.isEmpty, "\(left)")
  }

  /// One list of exporters: `report --export` writes from a stored report what the run wrote
  /// beside it, file for file and byte for byte.
  @Test("report --export writes the run's exports again")
  func exportWritesWhatTheRunWrote() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let output = directory.appendingPathComponent("reports")
    let run = try perfharness.run([
      "scenario", "closure-retain-cycles", "--iterations", "2", "--instruments", "time,allocations,leaks",
      "--output", output.path,
    ])
    #expect(run.status == 0, "\(run.standardError)")
    let folder = output.appendingPathComponent("closure-retain-cycles/starter")
    let exported = directory.appendingPathComponent("exported")
    let again = try perfharness.run([
      "report", folder.appendingPathComponent("report.json").path, "--export", exported.path,
    ])
    #expect(again.status == 0, "\(again.standardError)")
    let runFiles = try FileManager.default.contentsOfDirectory(atPath: folder.path)
      .filter { !$0.hasPrefix("report.") && !$0.hasPrefix(".") }.sorted()
    let exportedFiles = try FileManager.default.contentsOfDirectory(atPath: exported.path).sorted()
    #expect(runFiles == exportedFiles)
    #expect(runFiles.contains("heap.pb.gz") && runFiles.contains("leak-cycle-1.dot"), "\(runFiles)")
    for name in runFiles {
      let written = try Data(contentsOf: folder.appendingPathComponent(name))
      let rewritten = try Data(contentsOf: exported.appendingPathComponent(name))
      #expect(written == rewritten, "\(name)")
    }
  }
}
