/// One limit a run can be held to, as a thresholds file, the command line and the checks all
/// know it: its key in the file (also the name of the check it makes), the flag that
/// overrides it, the form of its value and the instrument that measures it.
///
/// ``Limit/all`` is the one table of them: the file parser, the flags, the checks and every
/// message that lists the accepted limits read it, so a new limit is added here, to
/// ``Thresholds`` and to ``ThresholdCheck``.
public struct Limit: Sendable {
  /// How a limit's value is written.
  public enum Form: Sendable {
    /// A ``ByteSize``.
    case size
    /// A whole number, 0 or more.
    case count
    /// A percentage from 0 to 100.
    case percent
    /// Type names with a count each (`TYPE: N` in a file, `TYPE=N` as a flag).
    case typeCounts

    /// What such a value is called in an error ("'x' is not a size").
    public var noun: String {
      switch self {
      case .size: "size"
      case .count: "count"
      case .percent: "percentage"
      case .typeCounts: "TYPE=N"
      }
    }

    /// The forms accepted, for error messages.
    public var accepted: String {
      switch self {
      case .size: ByteSize.acceptedForms
      case .count: "a whole number, 0 or more"
      case .percent: "a number from 0 to 100, with or without '%' (e.g. 95, 97.5%)"
      case .typeCounts: "a module-qualified type name, '=', a whole number (e.g. MyApp.Screen=1)"
      }
    }

    /// The values such a limit may take, for a value that is too large.
    public var range: String {
      switch self {
      case .size: "a size from 0 to \(Limit.largestValue) B (10^15 bytes, 1000000 GB)"
      case .count, .typeCounts: "a count from 0 to \(Limit.largestValue) (10^15)"
      case .percent: "a number from 0 to 100"
      }
    }
  }

  /// A parsed value.
  public enum Value: Sendable, Equatable {
    case size(ByteSize)
    case count(Int)
    case percent(Double)
    case typeCount(String, Int)
  }

  public let key: String
  /// The name of the long flag that sets it (without `--`; `--no-cycles` sets max-cycles to 0),
  /// nil for a setting only a file gives.
  public let flag: String?
  /// How the flag is shown in a list of accepted limits ("--max-growth SIZE").
  public let flagUsage: String?
  public let form: Form
  /// What measures it; nil for a setting that modifies other limits (the warm-up).
  public let instrument: Instrument?
  /// Help for the flag and the file.
  public let summary: String
  let store: @Sendable (inout Thresholds, Value) -> Void
  let isSet: @Sendable (Thresholds) -> Bool

  /// The largest value a size or count limit takes: a check stores its limit in the report,
  /// whose reader refuses anything larger (``Report/largestQuantity``). It also keeps the
  /// limit exact as a Double: `Int.max` became 2^63 there, and converting it back trapped.
  public static let largestValue = Int(Report.largestQuantity)

  /// Parses one value written in `form` (a scalar, or TYPE=N for ``Form/typeCounts``).
  /// - Returns: nil when `text` is in another form or beyond ``largestValue``.
  public func parse(_ text: String) -> Value? {
    guard let value = parseUnbounded(text), Self.isWithinRange(value) else { return nil }
    return value
  }

  private func parseUnbounded(_ text: String) -> Value? {
    switch form {
    case .size: return ByteSize(parsing: text).map(Value.size)
    case .count: return Self.count(parsing: text).map(Value.count)
    case .percent: return Self.percent(parsing: text).map(Value.percent)
    case .typeCounts:
      let parts = text.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
      guard parts.count == 2, !parts[0].isEmpty, let limit = Self.count(parsing: parts[1]) else { return nil }
      return .typeCount(parts[0], limit)
    }
  }

  private static func isWithinRange(_ value: Value) -> Bool {
    switch value {
    case .size(let size): size.bytes <= largestValue
    case .count(let count), .typeCount(_, let count): count <= largestValue
    case .percent: true
    }
  }

  /// A whole number, 0 or more (of any size: the range is checked apart, to say so).
  static func count(parsing text: String) -> Int? {
    guard let number = Int(text.trimmingCharacters(in: .whitespaces)), number >= 0 else { return nil }
    return number
  }

  /// Why `text` is no value of this limit, naming the accepted forms, or the accepted range
  /// for a value in the right form that is too large (for a flag or a file).
  public func rejection(of text: String) -> String {
    let tooLargeSize = form == .size && (ByteSize.magnitude(parsing: text) ?? 0) > Double(Self.largestValue)
    if tooLargeSize || parseUnbounded(text).map(Self.isWithinRange) == false {
      return "'\(text)' is too large; accepted: \(rangeDescription)"
    }
    return form == .typeCounts
      ? "'\(text)' is not TYPE=N; accepted: \(form.accepted)"
      : "'\(text)' is not a \(form.noun); accepted: \(form.accepted)"
  }

  /// The values this limit may take, for messages.
  public var rangeDescription: String { form.range }

  /// Sets this limit to `value` directly.
  public func set(_ value: Value, in thresholds: inout Thresholds) { store(&thresholds, value) }

  /// Whether `thresholds` sets this limit.
  public func isSet(in thresholds: Thresholds) -> Bool { isSet(thresholds) }

  /// "95", "97.5%": a percentage from 0 to 100.
  public static func percent(parsing text: String) -> Double? {
    var trimmed = text.trimmingCharacters(in: .whitespaces)
    if trimmed.hasSuffix("%") { trimmed = String(trimmed.dropLast()).trimmingCharacters(in: .whitespaces) }
    guard let value = Double(trimmed), value.isFinite, (0...100).contains(value) else { return nil }
    return value
  }
}

extension Limit {
  public static let maxGrowthPerGeneration = Limit(
    key: "max-growth-per-generation", flag: "max-growth", flagUsage: "--max-growth SIZE", form: .size,
    instrument: .allocations, summary: "Most growth of any generation after the warm-up (e.g. 64KB, 1MiB).",
    store: { if case .size(let size) = $1 { $0.maxGrowthPerGeneration = size } },
    isSet: { $0.maxGrowthPerGeneration != nil })

  public static let warmUpGenerations = Limit(
    key: "warm-up-generations", flag: nil, flagUsage: nil, form: .count, instrument: nil,
    summary: "Generations at the start that may grow freely.",
    store: { if case .count(let count) = $1 { $0.warmUpGenerations = count } },
    isSet: { $0.warmUpGenerations != Thresholds().warmUpGenerations })

  public static let maxLeakedBytes = Limit(
    key: "max-leaked-bytes", flag: "max-leaked-bytes", flagUsage: "--max-leaked-bytes SIZE", form: .size,
    instrument: .leaks, summary: "Most bytes in leaked blocks.",
    store: { if case .size(let size) = $1 { $0.maxLeakedBytes = size } }, isSet: { $0.maxLeakedBytes != nil })

  public static let maxCycles = Limit(
    key: "max-cycles", flag: "no-cycles", flagUsage: "--no-cycles", form: .count, instrument: .leaks,
    summary: "Fail on any retain cycle.", store: { if case .count(let count) = $1 { $0.maxCycles = count } },
    isSet: { $0.maxCycles != nil })

  public static let maxPersistent = Limit(
    key: "max-persistent", flag: "max-persistent", flagUsage: "--max-persistent TYPE=N", form: .typeCounts,
    instrument: .allocations, summary: "Most live instances of a type at the end: TYPE=N (repeatable).",
    store: { if case .typeCount(let type, let count) = $1 { $0.maxPersistent[type] = count } },
    isSet: { !$0.maxPersistent.isEmpty })

  public static let maxPeakHeap = Limit(
    key: "max-peak-heap", flag: "max-peak-heap", flagUsage: "--max-peak-heap SIZE", form: .size,
    instrument: .allocations, summary: "Most live heap at any time.",
    store: { if case .size(let size) = $1 { $0.maxPeakHeap = size } }, isSet: { $0.maxPeakHeap != nil })

  public static let minCoverage = Limit(
    key: "min-coverage", flag: "min-coverage", flagUsage: "--min-coverage PERCENT", form: .percent,
    instrument: .time,
    summary: "Least share of the threads' CPU time the Time Profiler's samples must stand for (e.g. 95%).",
    store: { if case .percent(let percent) = $1 { $0.minCoveragePercent = percent } },
    isSet: { $0.minCoveragePercent != nil })

  /// Every limit, in the order files and messages list them.
  public static let all: [Limit] = [
    maxGrowthPerGeneration, warmUpGenerations, maxLeakedBytes, maxCycles, maxPersistent, maxPeakHeap, minCoverage,
  ]

  public static func named(_ key: String) -> Limit? { all.first { $0.key == key } }
}
