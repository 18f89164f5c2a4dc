import ArgumentParser
import Foundation
import PerfHarness

enum OutputFormat: String, CaseIterable {
  case text, json
  /// GitHub-flavoured markdown for a pull request ($GITHUB_STEP_SUMMARY or a comment).
  case markdown
}

/// What to record and where the reports go: the options `scenario` and `record` share, their
/// help in `Subject`'s words.
struct RecordingOptions<Subject: RecordedSubject>: ParsableArguments {
  @Option(
    help: ArgumentHelp(
      "Comma-separated instruments: time, allocations, leaks, or none (default: \(Subject.defaultInstruments)).",
      valueName: "list"),
    transform: InstrumentList.parse)
  /// nil when `--instruments` was not given: each scenario then records its own.
  var instruments: Set<Instrument>?

  @Option(
    name: .customLong("sample-rate"),
    help: ArgumentHelp(
      "Time Profiler samples per second per thread (\(RecordingConfiguration.sampleRates.lowerBound)-\(RecordingConfiguration.sampleRates.upperBound)).",
      valueName: "hz"))
  var sampleRate: Int = RecordingConfiguration.defaultSampleRateHz

  @Option(
    help: "Time Profiler clock: cpu (CPU time of each thread, default) or wall (also samples blocked threads).",
    transform: Suggestion.value(of: SamplingClock.self))
  var clock: SamplingClock = .cpu

  @Flag(
    name: .customLong("leak-check-at-marks"),
    help: "With the leaks instrument: build the memory graph at every generation mark too (leaks.checks).")
  var leakCheckAtMarks = false

  @Flag(
    name: .customLong("no-allocation-stacks"),
    help: "Record allocation types and counts only, without stacks (cheaper).")
  var noAllocationStacks = false

  @Flag(
    name: .customLong("no-async-stacks"),
    help: "Stacks of Swift concurrency code end at the executor (the thread's stack), without the awaiting callers.")
  var noAsyncStacks = false

  @Option(
    help: ArgumentHelp(
      "Leak suppressions: lines of type:<glob> or stack:<glob>, # comments (LSan-style).", valueName: "file"))
  var suppressions: String?

  @Option(help: ArgumentHelp("Directory the reports are written under.", valueName: "dir"))
  var output: String = "Reports"

  @Option(
    help:
      "text (\(Subject.summary), default), json (one report per line) or markdown (for a pull request or $GITHUB_STEP_SUMMARY).",
    transform: Suggestion.value(of: OutputFormat.self))
  var format: OutputFormat = .text

  /// Throws for a setting out of its range or a --leak-check-at-marks without the leaks
  /// instrument.
  /// - Parameter lackingLeaks: without `--instruments`, the runs that would not record leaks.
  func validate(lackingLeaks: [String]) throws {
    if leakCheckAtMarks && (instruments.map { !$0.contains(.leaks) } ?? !lackingLeaks.isEmpty) {
      let which = lackingLeaks.isEmpty ? "" : " (not declared by \(lackingLeaks.joined(separator: ", ")))"
      throw ValidationError(
        "--leak-check-at-marks needs the leaks instrument\(which): add leaks to --instruments (e.g. --instruments allocations,leaks)"
      )
    }
    _ = try parsedSuppressions()
    do {
      try configuration(memoryWarningAtEnd: false).validate(names: ["sampleRateHz": "--sample-rate"])
    } catch {
      throw ValidationError(error.description)
    }
    try checkHandOverSize()
  }

  /// The settings reach the scenario's child or the preloaded recorder as a file read up to
  /// `BoundedFile.handOverLimit`: refused here, naming the suppressions that fill it, rather
  /// than cut off there.
  private func checkHandOverSize() throws {
    guard let suppressions else { return }
    let settings = ProgramRecording.Settings(
      configuration: configuration(memoryWarningAtEnd: true), resultDirectory: String(repeating: "/", count: 4096),
      markEverySeconds: 1)
    let size = (try? JSONEncoder().encode(settings).count) ?? 0
    guard size > BoundedFile.handOverLimit else { return }
    let fileSize = (try? FileManager.default.attributesOfItem(atPath: suppressions)[.size] as? Int) ?? 0
    throw ValidationError(
      "--suppressions \(suppressions): its \(ByteSize(bytes: fileSize)) make \(ByteSize(bytes: size)) of recording settings; accepted: settings of at most \(ByteSize(bytes: BoundedFile.handOverLimit)) (fewer or shorter patterns)"
    )
  }

  func parsedSuppressions() throws -> LeakSuppressions {
    guard let suppressions else { return .none }
    let text: String
    do {
      text = String(decoding: try BoundedFile.read(suppressions, limit: BoundedFile.settingsLimit), as: UTF8.self)
    } catch let error as BoundedFile.TooLarge {
      throw ValidationError("--suppressions: \(error)")
    } catch let error as BoundedFile.NotARegularFile {
      throw ValidationError(
        "--suppressions \(suppressions) is \(error.kind); accepted: a suppressions file, a regular file")
    } catch {
      throw ValidationError("--suppressions: cannot read \(suppressions): \(error.localizedDescription)")
    }
    do {
      return try LeakSuppressions(parsing: text)
    } catch {
      throw ValidationError("--suppressions \(suppressions): \(error)")
    }
  }

  /// What the options ask to record.
  func configuration(memoryWarningAtEnd: Bool) -> RecordingConfiguration {
    var configuration = RecordingConfiguration(
      instruments: instruments ?? Set(Instrument.defaults), sampleRateHz: sampleRate, clock: clock,
      memoryWarningAtEnd: memoryWarningAtEnd, allocationStacks: !noAllocationStacks,
      leakSuppressions: (try? parsedSuppressions()) ?? .none)
    configuration.leakCheckAtMarks = leakCheckAtMarks
    configuration.asyncStacks = !noAsyncStacks
    return configuration
  }
}

/// `--instruments`: outside the generic options, whose metatype a `transform` may not capture.
enum InstrumentList {
  /// `--instruments`: a comma-separated list of instruments, or none.
  static func parse(_ text: String) throws -> Set<Instrument> {
    if text == "none" { return [] }
    var result: [Instrument] = []
    for name in text.split(separator: ",", omittingEmptySubsequences: false) {
      let trimmed = name.trimmingCharacters(in: .whitespaces)
      guard let instrument = Instrument(rawValue: trimmed) else {
        let accepted = Instrument.allCases.map(\.rawValue)
        throw ValidationError(
          "unknown instrument '\(trimmed)' in --instruments; \(Suggestion.didYouMean(trimmed, among: accepted + ["none"]))"
            + "accepted: \(accepted.joined(separator: ", ")), comma-separated, or none")
      }
      result.append(instrument)
    }
    for instrument in result where !Instrument.available.contains(instrument) {
      throw ValidationError(
        "instrument '\(instrument.rawValue)' is not in this build yet; available: \(Instrument.available.map(\.rawValue).joined(separator: ", "))"
      )
    }
    return Set(result)
  }
}
