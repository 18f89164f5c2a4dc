/// Whether a baseline can judge a run at all: recorded the same way, and holding the figures
/// the gates need. The command line refuses a baseline that cannot (exit 64) before it
/// compares anything; ``BaselineComparison/compare(_:with:baselinePath:tolerances:)`` still
/// names each difference in a row for a caller that did not.
extension BaselineComparison {
  /// One way a baseline was set up otherwise than the run held against it.
  public struct SetupDifference: Sendable, Equatable {
    /// "scenario", "variant", "iterations" or "instruments".
    public var name: String
    public var current: String
    public var baseline: String
  }

  /// How `baseline` was set up otherwise than `current`. Another scenario or variant runs
  /// other code, other iterations do other amounts of work, and other instruments measure
  /// other figures (each instrument also slows the others): a regression or a pass against
  /// such a baseline says nothing about the change.
  public static func setupDifferences(
    _ current: Report.ScenarioInfo, baseline: Report.ScenarioInfo
  ) -> [SetupDifference] {
    let pairs = [
      ("scenario", current.name, baseline.name), ("variant", current.variant, baseline.variant),
      ("iterations", "\(current.iterations)", "\(baseline.iterations)"),
      ("instruments", describe(current.instruments), describe(baseline.instruments)),
    ]
    return pairs.filter { $0.1 != $0.2 }.map { SetupDifference(name: $0.0, current: $0.1, baseline: $0.2) }
  }

  private static func describe(_ instruments: [Instrument]) -> String {
    let names = Set(instruments.map(\.rawValue)).sorted()
    return names.isEmpty ? "none" : names.joined(separator: ",")
  }

  /// The instruments whose section `current` has and `baseline` lacks: their figures have
  /// nothing to be held against, and are not gated.
  public static func sectionsMissing(in baseline: Report, from current: Report) -> [Instrument] {
    Instrument.allCases.filter { current.hasSection(of: $0) && !baseline.hasSection(of: $0) }
  }

  /// What each gate the tolerances ask for explicitly (`--time-tolerance`,
  /// `--peak-tolerance`) needs and `baseline` lacks, for a run recording `instruments`;
  /// empty when it can serve them all.
  ///
  /// The command line refuses such a baseline: the person asked for a verdict on that
  /// figure, and a row saying "not gated" in a comparison that exits 0 would let CI pass a
  /// gate that was never applied (exit 2 would claim a regression nobody measured). The
  /// default gates are not asked for by name: their rows say the figure is missing, and
  /// every other figure is still judged.
  public static func explicitGatesLacking(
    in baseline: Report, instruments: Set<Instrument>, tolerances: ComparisonTolerances
  ) -> [String] {
    var lacking: [String] = []
    if tolerances.timePercent != nil, instruments.contains(.time), !baseline.hasSection(of: .time) {
      lacking.append("--time-tolerance gates the sampled time, and the baseline has no time profile")
    }
    if tolerances.peakPercent != nil, instruments.contains(.allocations), !baseline.hasSection(of: .allocations) {
      lacking.append("--peak-tolerance gates the peak heap, and the baseline has no allocations section")
    }
    return lacking
  }

  /// The figures a section holds that the comparison would gate, for the row that says they
  /// are not.
  static func gatedFigures(of instrument: Instrument) -> String {
    switch instrument {
    case .time: "the sampled time"
    case .allocations:
      "persistent bytes and blocks, total allocations, growth per generation, # Persistent by type, the peak heap"
    case .leaks: "leaked bytes and blocks, retain cycles"
    }
  }
}

extension Report {
  /// Whether the report holds the section `instrument` writes.
  public func hasSection(of instrument: Instrument) -> Bool {
    switch instrument {
    case .time: timeProfile != nil
    case .allocations: allocations != nil
    case .leaks: leaks != nil
    }
  }

  /// The section's name as a reader of the JSON knows it.
  static func sectionName(of instrument: Instrument) -> String {
    switch instrument {
    case .time: "time profile"
    case .allocations: "allocations"
    case .leaks: "leaks"
    }
  }
}
