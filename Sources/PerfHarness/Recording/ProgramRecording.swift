import CPerfAlloc
import Foundation

/// The recording of a whole unmodified process, for `perfharness record -- CMD`: the
/// preloaded recorder starts it in its constructor, before the program's `main`, marks
/// generations on a timer, a signal or the program's own call, and finishes it in its
/// destructor, after the program's `exit` handlers.
///
/// The same instruments as a scenario's, on the same `Recording`; every call here is
/// serialized by `lock`, and nothing else reaches the recording.
public final class ProgramRecording: @unchecked Sendable {
  /// What the harness hands the preloaded recorder, as JSON in the file this
  /// environment variable names.
  public static let settingsEnvironmentKey = "PERFHARNESS_RECORD"
  /// The harness's pid: the program it started dies with it (a parent-death signal).
  public static let harnessEnvironmentKey = "PERFHARNESS_RECORD_HARNESS"

  /// The preloaded recorder's settings: one file for the whole process tree, since every
  /// process that loads the recorder (the program and what it execs) reads the same.
  public struct Settings: Codable, Sendable, Equatable {
    public var configuration: RecordingConfiguration
    /// Each recorded process writes its report here as `<pid>.json`.
    public var resultDirectory: String
    /// Mark a generation this often, when set.
    public var markEverySeconds: Double?

    public init(configuration: RecordingConfiguration, resultDirectory: String, markEverySeconds: Double? = nil) {
      self.configuration = configuration
      self.resultDirectory = resultDirectory
      self.markEverySeconds = markEverySeconds
    }
  }

  private let lock = NSLock()
  private let recording: Recording
  private let configuration: RecordingConfiguration
  private let start = ContinuousClock.now
  private var finished = false

  /// Starts every configured instrument.
  public init(configuration: RecordingConfiguration) throws {
    self.configuration = configuration
    // What starting allocates is the harness's, not the program's.
    let previous = CPerfAlloc_setIgnoringAllocations(1)
    defer { _ = CPerfAlloc_setIgnoringAllocations(previous) }
    recording = Recording(configuration: configuration)
    try recording.start()
  }

  /// Marks a generation: memory allocated from here to the next mark belongs to it. After
  /// `finish` it does nothing.
  public func markGeneration(_ label: @autoclosure () -> String) {
    // Called on the program's thread (perfharness_mark): what marking allocates is the
    // harness's, the label's storage first (a label of 16 bytes or more is a heap string,
    // which the program neither made nor can free).
    let previous = CPerfAlloc_setIgnoringAllocations(1)
    defer { _ = CPerfAlloc_setIgnoringAllocations(previous) }
    let label = label()
    lock.withLock {
      guard !finished else { return }
      recording.markGeneration(label: label)
    }
  }

  /// Ends every instrument (with the leak scan, which parks the program's other threads)
  /// and builds the report.
  /// - Parameter program: what the report says of the program, built as the harness's work
  ///   (what it allocates is neither counted nor leaked).
  public func finish(program describe: () -> ProgramInfo) -> Report {
    lock.withLock {
      finished = true
      // From here on the harness's work, not the program's.
      let previous = CPerfAlloc_setIgnoringAllocations(1)
      defer { _ = CPerfAlloc_setIgnoringAllocations(previous) }
      let program = describe()
      recording.finish()
      return report(status: .passed, error: nil, program: program)
    }
  }

  /// Ends every instrument in a process a fatal signal is ending, without the leak scan
  /// (the thread that took the signal cannot be parked and read), and builds the report
  /// so far. nil when the recording stays busy (the signal landed in a mark) for a second.
  public func finishAfterCrash(error: String, program describe: () -> ProgramInfo) -> Report? {
    guard lock.lock(before: Date(timeIntervalSinceNow: 1)) else { return nil }
    defer { lock.unlock() }
    finished = true
    let previous = CPerfAlloc_setIgnoringAllocations(1)
    defer { _ = CPerfAlloc_setIgnoringAllocations(previous) }
    let program = describe()
    recording.finishAfterCrash()
    return report(status: .crashed, error: error, program: program)
  }

  /// The report of the finished recording. Call under `lock`.
  private func report(status: RunStatus, error: String?, program: ProgramInfo) -> Report {
    let sections = recording.sections()
    let marks = recording.marks
    var report = Report(
      schemaVersion: Report.currentSchemaVersion,
      tool: .init(name: "perfharness", version: PerfHarnessVersion.current),
      environment: .current(),
      scenario: .init(
        name: Self.reportName(forExecutable: program.executable), variant: Self.variant, iterations: 1,
        instruments: Instrument.allCases.filter(configuration.instruments.contains)),
      status: status, error: sections.failure(after: error),
      wallTimeMilliseconds: (ContinuousClock.now - start).milliseconds, steps: [], marks: marks, checks: [],
      timeProfile: sections.timeProfile, allocations: sections.allocations, leaks: sections.leaks, crash: nil)
    report.program = program
    return report
  }

  /// The variant of every recorded program's report: a program has no variants.
  public static let variant = "record"

  /// A report name for an executable: its file name in the characters a scenario name
  /// takes (lowercase letters, digits and '-'), so reports and baselines find each other.
  public static func reportName(forExecutable path: String) -> String {
    let file = path.split(separator: "/").last.map(String.init) ?? path
    var name = ""
    for scalar in file.lowercased().unicodeScalars {
      let keep = ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar)
      if keep {
        name.unicodeScalars.append(scalar)
      } else if !name.isEmpty && !name.hasSuffix("-") {
        name += "-"
      }
    }
    while name.hasSuffix("-") { name.removeLast() }
    return name.isEmpty ? "program" : name
  }
}
