import ArgumentParser
import Foundation
import PerfHarness
import Synchronization

/// The `perfharness` command line over a set of scenarios.
///
/// Your own executable gets the same CLI for its own scenarios:
/// ```swift
/// import PerfHarness
/// import PerfHarnessCLI
///
/// PerfHarnessCLI.main(scenarios: [myScenario])
/// ```
public enum PerfHarnessCLI {
  /// Parses the process's arguments, runs the command and exits with the documented code.
  /// Must be called on the main thread: scenarios run there.
  public static func main(scenarios: [Scenario]) -> Never {
    let declared = ScenarioCatalog(scenarios)
    if !declared.problems.isEmpty {
      // The package's own code, not the command line: exit 1, before anything runs.
      let name = PerfHarnessCommand.configuration.commandName ?? "perfharness"
      let lines = declared.problems.map { "  \($0)\n" }.joined()
      FileHandle.standardError.write(
        Data("\(name): the scenarios passed to PerfHarnessCLI.main are declared wrongly:\n\(lines)".utf8))
      exit(ExitCodes.harnessError.rawValue)
    }
    catalog.withLock { $0 = declared }
    let arguments = Array(CommandLine.arguments.dropFirst())
    CommandLineParsing.reportParserErrors(in: arguments)
    PerfHarnessCommand.main(arguments)
    exit(0)
  }

  static let catalog = Mutex(ScenarioCatalog([]))
  static var currentCatalog: ScenarioCatalog { catalog.withLock { $0 } }
}

struct PerfHarnessCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    // A package's own scenario executable says its own name in usage and errors.
    commandName: CommandLine.arguments.first.map { String($0.split(separator: "/").last ?? "perfharness") }
      ?? "perfharness",
    abstract: "Instruments for Swift on Linux: time profiles, allocations and leaks of repeatable scenarios.",
    discussion: """
      Exit codes: 0 ran and every check passed · 2 a threshold check failed · 3 the scenario \
      crashed or timed out · 64 usage error · 1 any other harness error · 130/143 interrupted by \
      SIGINT/SIGTERM (an interrupted report is still written).
      """,
    version: PerfHarnessVersion.current,
    subcommands: [ListCommand.self, ScenarioCommand.self, RecordCommand.self, ReportCommand.self, CompareCommand.self])
}

/// ArgumentParser validates a command (`validate()`) before it looks for unknown options,
/// and by then an unknown option's value has been read as an argument: `scenario
/// closure-retain-cycles --instrument leaks` blamed "unknown scenario 'leaks'". So the
/// arguments are parsed once with validation deferred, which lets the parser report what is
/// its own (an unknown option with its "did you mean", a value that does not parse, a
/// missing value) about what was typed; only then are they parsed again to be validated and
/// run.
enum CommandLineParsing {
  /// True during the first parse: every `validate()` returns at once.
  @TaskLocal static var validationDeferred = false

  /// Exits with ArgumentParser's own message and code (64, or 0 for `--help`) when
  /// `arguments` do not parse; returns when they do.
  static func reportParserErrors(in arguments: [String]) {
    if let unknown = unknownSubcommand(in: arguments) {
      PerfHarnessCommand.exit(withError: unknown)
    }
    $validationDeferred.withValue(true) {
      do {
        _ = try PerfHarnessCommand.parseAsRoot(arguments)
      } catch {
        PerfHarnessCommand.exit(withError: error)
      }
    }
  }

  /// A first argument that names no subcommand, with the one it resembles. ArgumentParser
  /// reads it as an unexpected argument ("2 unexpected arguments: 'reprot', 'x.json'") and
  /// lists neither the subcommands nor the nearest one.
  static func unknownSubcommand(in arguments: [String]) -> ValidationError? {
    guard let first = arguments.first, !first.hasPrefix("-") else { return nil }
    let names = PerfHarnessCommand.configuration.subcommands.compactMap { $0.configuration.commandName }
    // `help` is ArgumentParser's own: `perfharness help record`.
    guard !(names + ["help"]).contains(first) else { return nil }
    return ValidationError(
      "unknown subcommand '\(first)'; \(Suggestion.didYouMean(first, among: names))"
        + "accepted: \(names.joined(separator: ", "))")
  }
}

/// Exit codes of the contract (docs/design.md, "Exit codes").
enum ExitCodes {
  static let checkFailed = ExitCode(2)
  static let crashed = ExitCode(3)
  static let harnessError = ExitCode(1)
}

#if canImport(Glibc)
  import Glibc
#endif
