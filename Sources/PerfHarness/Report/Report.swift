/// One scenario run as the JSON report (schemaVersion 1) stores it. The keys are the
/// contract CI consumers read: see docs/design.md, "JSON keys", and the schema in
/// Sources/PerfReports/Schema/report-v1.schema.json.
public struct Report: Codable, Sendable {
  public var schemaVersion: Int
  public var tool: Tool
  public var environment: RunEnvironment
  public var scenario: ScenarioInfo
  public var status: RunStatus
  /// Why the run did not finish, when it did not.
  public var error: String?
  public var wallTimeMilliseconds: Double
  /// Wall time of the scenario's named steps, aggregated by name in order of first use.
  public var steps: [StepSummary]
  /// The generation marks, in order.
  public var marks: [GenerationMark]
  public var checks: [CheckResult]
  /// The Time Profiler's results, when it recorded.
  public var timeProfile: TimeProfileReport?
  /// The Allocations instrument's results, when it recorded.
  public var allocations: AllocationsReport?
  /// The leaks instrument's memory graph: leaked blocks and retain cycles.
  public var leaks: LeaksReport?
  /// How the scenario's process died, when it crashed or timed out.
  public var crash: CrashInfo?
  /// This run against a stored report, when run with `--baseline`.
  public var comparison: BaselineComparison? = nil
  /// Whether anything judged the run (`--check`, `--baseline`). `status` stays `passed`
  /// for a run nobody judged (the key's values are a contract); this key says that
  /// `passed` then means only "ran to the end". nil in reports written before the key.
  public var checked: Bool? = nil
  /// What the run measured that no check and no baseline tolerance gated, when anything
  /// judged it: what its `passed` does not vouch for. nil in reports written before the key
  /// (``notGatedFigures`` reads their figures instead) and for runs nothing judged.
  public var notGated: [UngatedFigure]? = nil
  /// The program `perfharness record` ran, when the run recorded an unmodified executable
  /// rather than a scenario.
  public var program: ProgramInfo? = nil

  public static let currentSchemaVersion = 1

  /// No measured quantity comes near 10^15 (bytes: a petabyte; milliseconds: 31,000 years;
  /// counts: a million per second for 31 years), so a reader refuses any number beyond it:
  /// conversions to Int and sums of thousands of them cannot trap. Limits and tolerances a
  /// report stores are held to it when they are given, or the report would not read back.
  public static let largestQuantity = 1e15

  public struct Tool: Codable, Sendable {
    public var name: String
    public var version: String
  }

  public struct ScenarioInfo: Codable, Sendable {
    public var name: String
    public var variant: String
    public var iterations: Int
    public var instruments: [Instrument]

    public init(name: String, variant: String, iterations: Int, instruments: [Instrument]) {
      self.name = name
      self.variant = variant
      self.iterations = iterations
      self.instruments = instruments
    }
  }
}

/// An unmodified program recorded by `perfharness record`, and how it ended.
public struct ProgramInfo: Codable, Sendable {
  /// The executable's path, as run.
  public var executable: String
  public var arguments: [String]
  public var pid: Int
  /// Its exit status, when it exited.
  public var exitStatus: Int?
  /// The signal that ended it (`SIGSEGV`); for SIGINT and SIGTERM, which the recorder turns
  /// into an exit so the report is still written, also set beside `exitStatus`.
  public var signal: String?
  /// Processes it started that exec'd a dynamically linked program, each recorded in a
  /// report of its own.
  public var children: [Child]?

  public init(executable: String, arguments: [String], pid: Int) {
    self.executable = executable
    self.arguments = arguments
    self.pid = pid
  }

  /// How it ended, in words: "exit status 0", "SIGSEGV", "SIGTERM (exit status 143)".
  public var ending: String {
    switch (exitStatus, signal) {
    case (let status?, let signal?): return "\(signal) (exit status \(status))"
    case (let status?, nil): return "exit status \(status)"
    case (nil, let signal?): return signal
    case (nil, nil): return "still running"
    }
  }

  /// A process the program started, recorded separately.
  public struct Child: Codable, Sendable {
    public var pid: Int
    public var executable: String
    /// The child's report folder, relative to the program's.
    public var report: String

    public init(pid: Int, executable: String, report: String) {
      self.pid = pid
      self.executable = executable
      self.report = report
    }
  }
}

/// How a scenario's process died.
public struct CrashInfo: Codable, Sendable {
  /// The signal that ended it (`SIGSEGV`), when a signal did.
  public var signal: String?
  public var timedOut: Bool
  /// The crashing thread's stack as the Swift runtime's backtracer printed it.
  public var stack: [String]
  /// The last lines the process wrote to stderr.
  public var standardErrorTail: [String]

  public init(signal: String?, timedOut: Bool, stack: [String], standardErrorTail: [String]) {
    self.signal = signal
    self.timedOut = timedOut
    self.stack = stack
    self.standardErrorTail = standardErrorTail
  }
}

extension Report {
  /// The report of a run whose process died before it could write its own.
  public static func crashed(
    scenario: String, variant: String, iterations: Int, instruments: [Instrument], error: String,
    wallTimeMilliseconds: Double, crash: CrashInfo
  ) -> Report {
    Report(
      schemaVersion: currentSchemaVersion, tool: .init(name: "perfharness", version: PerfHarnessVersion.current),
      environment: .current(),
      scenario: .init(name: scenario, variant: variant, iterations: iterations, instruments: instruments),
      status: .crashed, error: error, wallTimeMilliseconds: wallTimeMilliseconds, steps: [], marks: [], checks: [],
      timeProfile: nil, allocations: nil, leaks: nil, crash: crash)
  }
}

extension Report {
  /// Whether a check or a baseline judged the run; inferred for reports without `checked`.
  public var wasChecked: Bool { checked ?? (!checks.isEmpty || comparison?.judgedAnything == true) }

  /// What a person reads as the outcome: `status`, but `no checks` for a run that finished
  /// with nothing judging it, so a leaking run is never shown as `passed` on its own say-so.
  public var verdict: String {
    status == .passed && !wasChecked ? "no checks" : status.rawValue
  }
}

/// How a run ended.
public enum RunStatus: String, Codable, Sendable {
  case passed, failed, crashed
  /// Stopped by SIGINT or SIGTERM to the harness: what was recorded until then.
  case interrupted
}

/// Wall time of one named scenario step.
public struct StepSummary: Codable, Sendable {
  public var name: String
  public var count: Int
  public var totalMilliseconds: Double
  public var medianMilliseconds: Double
  public var maxMilliseconds: Double
}

/// A Mark Generation point in the run.
public struct GenerationMark: Codable, Sendable {
  public var index: Int
  public var label: String
  /// Milliseconds since the recording started.
  public var timeMilliseconds: Double
  public var isMemoryWarning: Bool
}

/// One CI threshold and how the run measured against it.
public struct CheckResult: Codable, Sendable {
  public var name: String
  public var limit: Double
  /// nil when nothing measured it (the instrument did not run): such a check fails.
  public var actual: Double?
  public var passed: Bool
  /// Which generation or type, and where it was allocated.
  public var detail: String?

  public init(name: String, limit: Double, actual: Double?, passed: Bool, detail: String?) {
    self.name = name
    self.limit = limit
    self.actual = actual
    self.passed = passed
    self.detail = detail
  }
}

extension StepSummary {
  static func summaries(of steps: [StepTiming]) -> [StepSummary] {
    var order: [String] = []
    var durations: [String: [Double]] = [:]
    for step in steps {
      if durations[step.name] == nil { order.append(step.name) }
      durations[step.name, default: []].append(step.duration.milliseconds)
    }
    return order.map { name in
      let values = durations[name]!.sorted()
      return StepSummary(
        name: name, count: values.count, totalMilliseconds: values.reduce(0, +),
        medianMilliseconds: values.median, maxMilliseconds: values.last ?? 0)
    }
  }
}

extension [Double] {
  /// The median of already sorted values.
  var median: Double {
    guard !isEmpty else { return 0 }
    return count % 2 == 1 ? self[count / 2] : (self[count / 2 - 1] + self[count / 2]) / 2
  }
}
