/// A run measured against a stored report of the same scenario: `--baseline` and
/// `perfharness compare` (the JSON report's `comparison` section).
///
/// Memory and leak figures are gated: one that grew beyond the tolerance fails the
/// comparison. Times are shown but gated only when a time tolerance is given, because wall
/// and CPU time on a shared CI machine swing by more than any useful tolerance. So is the
/// peak heap: where background work hands results to the main thread, how many of them are
/// alive at once depends on scheduling (two runs of one unchanged program peaked at 3.63 and
/// 4.66 MB), while what stays alive does not.
public struct BaselineComparison: Codable, Sendable, Equatable {
  /// Where the baseline report was read from.
  public var baseline: String
  /// The baseline's scenario and variant, e.g. "search-drill-downs [starter]".
  public var baselineScenario: String
  public var tolerancePercent: Double
  /// nil when times are informational.
  public var timeTolerancePercent: Double?
  /// nil when the peak heap is informational.
  public var peakTolerancePercent: Double?
  /// Increases of byte figures up to this many bytes never fail (allocator noise).
  public var minimumBytes: Int
  /// Increases of block counts up to this many never fail (library blocks cached per
  /// thread); retain cycles and the program's own types have no such allowance.
  public var minimumCount: Int
  public var passed: Bool
  public var rows: [Row]
  /// The program's functions whose share of the samples moved most (nil when either run has
  /// no time profile): what a differential flame graph colours.
  public var functionChanges: [FunctionChange]? = nil
  /// Every program function with self time in either run (up to 5,000), for the HTML
  /// report's differential flame graph.
  public var functionShares: [FunctionChange]? = nil
  /// The allocation stacks whose live bytes at the end grew most (nil when either run kept
  /// no allocation stacks).
  public var allocationChanges: [AllocationChange]? = nil
  /// What the baseline kept live at the end of each of this run's allocation stacks (the
  /// same frames, by symbol and line, and category): what the HTML report's allocation flame
  /// graph colours by against the baseline. Stacks the baseline did not have are left out
  /// (it kept nothing there). Nil when either run kept no allocation stacks.
  public var allocationStackBaselines: [AllocationStackBaseline]? = nil
  /// The same for everything allocated: for each of this run's `allocations.totalStacks`
  /// the baseline had too, what the baseline allocated there (`stack` indexes
  /// `totalStacks`). Nil unless both runs kept totals by stack.
  public var totalStackBaselines: [AllocationStackBaseline]? = nil
  /// The rest of the baseline: what it kept at stacks this run does not have, and its
  /// whole-run totals, so that a differential view sums the whole baseline. Nil when either
  /// run kept no allocation stacks.
  public var unmatchedBaseline: UnmatchedBaseline? = nil

  public struct Row: Codable, Sendable, Equatable {
    public var metric: String
    /// "bytes", "count" or "ms".
    public var unit: String
    /// nil when that run did not measure it.
    public var baseline: Double?
    public var current: Double?
    /// nil when either side is missing, or the baseline is 0.
    public var changePercent: Double?
    /// nil when the row is informational.
    public var limitPercent: Double?
    public var passed: Bool
    public var detail: String?
  }
}

/// How much a figure may grow before the comparison fails.
public struct ComparisonTolerances: Sendable, Equatable {
  public var percent: Double
  public var timePercent: Double?
  public var peakPercent: Double?
  public var minimumBytes: Int
  public var minimumCount: Int
  /// Whether a baseline of another scenario or variant, or recorded with other iterations
  /// or instruments, may be compared: by default the command line refuses it and such a
  /// comparison fails, since its figures measure something else.
  public var allowsDifferentSetup: Bool

  /// The size of the blocks a library caches per thread (a Dispatch continuation): block
  /// counts may grow by as many of them as `minimumBytes` allows.
  public static let cachedBlockBytes = 64

  /// - Parameter minimumCount: by default `minimumBytes / cachedBlockBytes`, so that one
  ///   allowance (`--min-increase`) covers both. With 4 KiB that is 64 blocks: Dispatch keeps
  ///   freed 64-byte continuations per thread, and a rerun of the same program under load
  ///   ended with up to 47 more of them (while its bytes stayed within 4 KiB).
  public init(
    percent: Double = 10, timePercent: Double? = nil, peakPercent: Double? = nil, minimumBytes: Int = 4096,
    minimumCount: Int? = nil, allowsDifferentSetup: Bool = false
  ) {
    self.allowsDifferentSetup = allowsDifferentSetup
    self.percent = percent
    self.timePercent = timePercent
    self.peakPercent = peakPercent
    self.minimumBytes = minimumBytes
    self.minimumCount = minimumCount ?? minimumBytes / Self.cachedBlockBytes
  }
}

extension BaselineComparison {
  /// Types whose # Persistent changed get a row each, the largest increases first, up to this many.
  static let persistentTypeRowLimit = 20

  /// Compares `current` with `baseline`, figure by figure.
  /// - Parameters:
  ///   - baselinePath: shown in the report so a reader knows what the run was held against.
  public static func compare(
    _ current: Report, with baseline: Report, baselinePath: String, tolerances: ComparisonTolerances = .init()
  ) -> BaselineComparison {
    var builder = RowBuilder(tolerances: tolerances)
    for difference in setupDifferences(current.scenario, baseline: baseline.scenario) {
      builder.setup(difference)
    }
    for instrument in sectionsMissing(in: baseline, from: current) {
      builder.missingSection(instrument)
    }

    let base = baseline.allocations
    let now = current.allocations
    builder.peakHeap(base?.totals.peakLiveBytes, now?.totals.peakLiveBytes)
    builder.gated("persistent bytes", .bytes, base?.totals.persistentBytes, now?.totals.persistentBytes)
    builder.gated(
      "persistent blocks", .count, base?.totals.persistentCount, now?.totals.persistentCount,
      minimum: tolerances.minimumCount)
    builder.gated(
      "total allocations", .count, base?.totals.totalAllocations, now?.totals.totalAllocations,
      minimum: tolerances.minimumCount)
    builder.gated(
      "max growth per generation (after the first)", .bytes, base.flatMap(maxGrowthAfterWarmUp),
      now.flatMap(maxGrowthAfterWarmUp))
    if let base, let now { builder.persistentTypes(base, now) }

    // A leak is never noise: any increase fails, whatever the tolerance.
    builder.exact("leaked bytes", .bytes, baseline.leaks?.leakedBytes, current.leaks?.leakedBytes)
    builder.exact("leaked blocks", .count, baseline.leaks?.leakedCount, current.leaks?.leakedCount)
    builder.exact("retain cycles", .count, baseline.leaks.map(cycleCount), current.leaks.map(cycleCount))

    builder.timed("wall time", baseline.wallTimeMilliseconds, current.wallTimeMilliseconds)
    builder.timed(
      "sampled time", baseline.timeProfile?.totalWeightMilliseconds, current.timeProfile?.totalWeightMilliseconds)
    let baseSteps = Dictionary(baseline.steps.map { ($0.name, $0.medianMilliseconds) }) { first, _ in first }
    for step in current.steps {
      builder.timed("step '\(step.name)' median", baseSteps[step.name], step.medianMilliseconds)
    }

    var comparison = BaselineComparison(
      baseline: baselinePath, baselineScenario: "\(baseline.scenario.name) [\(baseline.scenario.variant)]",
      tolerancePercent: tolerances.percent, timeTolerancePercent: tolerances.timePercent,
      peakTolerancePercent: tolerances.peakPercent,
      minimumBytes: tolerances.minimumBytes, minimumCount: tolerances.minimumCount,
      passed: builder.rows.allSatisfy(\.passed), rows: builder.rows)
    if let before = baseline.timeProfile?.profile, let after = current.timeProfile?.profile {
      let shares = functionShares(from: before, to: after)
      comparison.functionShares = shares
      comparison.functionChanges = functionChanges(fromShares: shares)
    }
    if let base, let now, base.persistentStacks != nil, now.persistentStacks != nil {
      let grown = allocationChanges(from: base, to: now)
      comparison.allocationChanges = grown
      comparison.allocationStackBaselines = allocationStackBaselines(from: base, to: now)
      if base.totalStacks != nil, now.totalStacks != nil {
        comparison.totalStackBaselines = totalStackBaselines(from: base, to: now)
      }
      comparison.unmatchedBaseline = unmatchedBaseline(from: base, to: now)
      // A byte figure that failed says where the new bytes were allocated.
      if let top = grown.first {
        for index in comparison.rows.indices
        where !comparison.rows[index].passed && comparison.rows[index].unit == Unit.bytes.rawValue
          && !comparison.rows[index].metric.hasPrefix("leaked")
        {
          let site =
            "grew most at \(top.site): +\(ByteSize(bytes: top.currentBytes - top.baselineBytes)) of \(top.category)"
          comparison.rows[index].detail = [comparison.rows[index].detail, site].compactMap { $0 }.joined(
            separator: "; ")
        }
      }
      // So does a count of live blocks or instances: the stack whose count grew most, of that
      // type for a type's row. (Total allocations count the transient too, which the
      // persistent stacks do not hold: left without a site.)
      let byCount = grown.filter { $0.currentCount > $0.baselineCount }
        .sorted { ($0.currentCount - $0.baselineCount, $1.site) > ($1.currentCount - $1.baselineCount, $0.site) }
      for index in comparison.rows.indices
      where !comparison.rows[index].passed && comparison.rows[index].unit == Unit.count.rawValue {
        let metric = comparison.rows[index].metric
        let typePrefix = "# Persistent "
        let candidates =
          metric == "persistent blocks"
          ? byCount
          : metric.hasPrefix(typePrefix) ? byCount.filter { $0.category == metric.dropFirst(typePrefix.count) } : []
        guard let top = candidates.first else { continue }
        let site = "grew most at \(top.site): +\(top.currentCount - top.baselineCount) \(top.category)"
        comparison.rows[index].detail = [comparison.rows[index].detail, site].compactMap { $0 }.joined(separator: "; ")
      }
    }
    return comparison
  }

  /// nil without a generation after the warm-up: a run that has none has no such figure,
  /// and 0 in its place would fail any growth in the other run, or pass any shrink.
  private static func maxGrowthAfterWarmUp(_ allocations: AllocationsReport) -> Int? {
    allocations.generations.dropFirst(Thresholds().warmUpGenerations).map(\.growthBytes).max()
  }

  private static func cycleCount(_ leaks: LeaksReport) -> Int {
    leaks.cycles.reduce(0) { $0 + $1.instances }
  }
}

private enum Unit: String {
  case bytes, count, ms
}

private struct RowBuilder {
  let tolerances: ComparisonTolerances
  var rows: [BaselineComparison.Row] = []

  mutating func gated(_ metric: String, _ unit: Unit, _ baseline: Int?, _ current: Int?, minimum: Int? = nil) {
    let slack = minimum ?? (unit == .bytes ? tolerances.minimumBytes : 0)
    add(metric, unit, baseline.map(Double.init), current.map(Double.init), limit: tolerances.percent, slack: slack)
  }

  /// Gated only with a peak tolerance (see `BaselineComparison`).
  mutating func peakHeap(_ baseline: Int?, _ current: Int?) {
    add(
      "peak heap", .bytes, baseline.map(Double.init), current.map(Double.init), limit: tolerances.peakPercent,
      slack: tolerances.minimumBytes)
  }

  /// No allowance: any increase fails.
  mutating func exact(_ metric: String, _ unit: Unit, _ baseline: Int?, _ current: Int?) {
    add(metric, unit, baseline.map(Double.init), current.map(Double.init), limit: 0, slack: 0)
  }

  /// How the runs were set up, where they differ: failing unless the tolerances allow it.
  mutating func setup(_ difference: BaselineComparison.SetupDifference) {
    let metric = difference.name
    rows.append(
      BaselineComparison.Row(
        metric: "\(metric): \(difference.current) (baseline: \(difference.baseline))", unit: "setup",
        baseline: nil, current: nil, changePercent: nil, limitPercent: nil, passed: tolerances.allowsDifferentSetup,
        detail: tolerances.allowsDifferentSetup
          ? "the runs differ in \(metric) (--allow-different-setup)"
          : "the runs differ in \(metric): the baseline's figures are not comparable; rerun it, or pass --allow-different-setup if this is intended"
      ))
  }

  /// A section the run has and the baseline lacks: the comparison says which gates it could
  /// not apply, beside the rows that say so figure by figure.
  mutating func missingSection(_ instrument: Instrument) {
    let section = Report.sectionName(of: instrument)
    rows.append(
      BaselineComparison.Row(
        metric: "\(section): not in the baseline", unit: "setup", baseline: nil, current: nil, changePercent: nil,
        limitPercent: nil, passed: true,
        detail:
          "the baseline has no \(section) section: \(BaselineComparison.gatedFigures(of: instrument)) not gated"))
  }

  mutating func timed(_ metric: String, _ baseline: Double?, _ current: Double?) {
    add(metric, .ms, baseline, current, limit: tolerances.timePercent, slack: 0)
  }

  /// # Persistent of each Swift type (not malloc size classes) whose count changed: a screen
  /// that now stays alive shows up here by name even when the byte totals hide it. Only the
  /// program's own types are gated, with no allowance (one more screen alive is the
  /// regression this row exists for): how many run loops, locks or dictionaries the libraries
  /// keep depends on how many worker threads Dispatch happened to start.
  mutating func persistentTypes(_ baseline: AllocationsReport, _ current: AllocationsReport) {
    func counts(_ report: AllocationsReport) -> [String: (count: Int, isApp: Bool)] {
      Dictionary(
        report.categories.filter { $0.kind != "malloc" }.map { ($0.name, ($0.persistentCount, $0.isApp ?? false)) }
      ) { first, _ in first }
    }
    let baseCounts = counts(baseline)
    let currentCounts = counts(current)
    let changed = Set(baseCounts.keys).union(currentCounts.keys)
      .map { name in
        (
          name: name, base: baseCounts[name]?.count ?? 0, now: currentCounts[name]?.count ?? 0,
          isApp: (baseCounts[name]?.isApp ?? false) || (currentCounts[name]?.isApp ?? false)
        )
      }
      .filter { $0.base != $0.now }
      .sorted { ($0.isApp ? 1 : 0, $0.now - $0.base, $1.name) > ($1.isApp ? 1 : 0, $1.now - $1.base, $0.name) }
    for type in changed.prefix(BaselineComparison.persistentTypeRowLimit) {
      add(
        "# Persistent \(type.name)", .count, Double(type.base), Double(type.now),
        limit: type.isApp ? 0 : nil, slack: 0)
    }
  }

  private mutating func add(
    _ metric: String, _ unit: Unit, _ baseline: Double?, _ current: Double?, limit: Double?, slack: Int
  ) {
    guard baseline != nil || current != nil else { return }
    var row = BaselineComparison.Row(
      metric: metric, unit: unit.rawValue, baseline: baseline, current: current, changePercent: nil,
      limitPercent: limit, passed: true, detail: nil)
    switch (baseline, current) {
    case (let base?, let now?):
      if base != 0 { row.changePercent = (now - base) / base * 100 }
      if let limit {
        let allowed = base * (1 + limit / 100)
        row.passed = now <= allowed || now - base <= Double(slack)
        if !row.passed {
          row.detail =
            base == 0
            ? "was 0"
            : limit == 0 ? "grew; no increase is allowed" : "more than \(formatPercent(limit)) over the baseline"
        }
      }
    case (_?, nil):
      // A gate that silently passes because the figure is gone is worse than a failure.
      row.passed = limit == nil
      row.detail = "not measured in this run"
    case (nil, _?):
      // Never read as 0: with nothing to hold the figure against, a gate has no verdict, and
      // a row marked as passing it would say it had one.
      row.limitPercent = nil
      row.detail = limit == nil ? "not measured in the baseline" : "the baseline has no such figure (not gated)"
    case (nil, nil):
      break
    }
    rows.append(row)
  }
}

private func formatPercent(_ value: Double) -> String {
  value == value.rounded() ? "\(Int(value)) %" : "\(value) %"
}
