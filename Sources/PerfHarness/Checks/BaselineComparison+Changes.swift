extension BaselineComparison {
  /// A function whose share of the samples it executed in changed between the runs (Top
  /// Functions' self time, with Hide System Libraries: system time charged to the program's
  /// caller). Shares, not milliseconds: the runs may differ in length.
  public struct FunctionChange: Codable, Sendable, Equatable {
    public var symbol: String
    public var module: String
    public var baselineSelfPercent: Double
    public var currentSelfPercent: Double

    /// Percentage points gained (positive) or lost.
    public var changePoints: Double { currentSelfPercent - baselineSelfPercent }
  }

  /// An allocation stack whose blocks still live at the end changed between the runs.
  public struct AllocationChange: Codable, Sendable, Equatable {
    /// The category most of the bytes belong to.
    public var category: String
    /// Where the program made them: its own first frame, `symbol (file:line)`.
    public var site: String
    public var baselineBytes: Int
    public var currentBytes: Int
    public var baselineCount: Int
    public var currentCount: Int
  }

  /// The baseline's live bytes and blocks at the end for one of this run's allocation stacks.
  public struct AllocationStackBaseline: Codable, Sendable, Equatable {
    /// Index into this run's `allocations.persistentStacks`.
    public var stack: Int
    public var bytes: Int
    public var count: Int
  }

  /// The baseline's allocation stacks that none of this run's stacks match (by the keys of
  /// ``allocationStackBaselines`` and ``totalStackBaselines``), with the frames they index
  /// and the baseline's totals. Summing only the matched stacks, a flame graph's root read
  /// "+7.95 MiB against the baseline" where the baseline had kept 31.6 KiB of its 32.4 KiB
  /// at stacks of its own, and "+329 blocks" where the persistent blocks had fallen 28 %.
  public struct UnmatchedBaseline: Codable, Sendable, Equatable {
    /// The baseline's whole-run totals: a differential root weighs these, stacks kept or not.
    public var totals: AllocationsReport.Totals
    /// The frames the stacks below index, each once.
    public var stackFrames: [AllocationsReport.StackFrame]
    public var persistentStacks: [AllocationsReport.PersistentStack]
    /// Nil unless both runs kept totals by stack.
    public var totalStacks: [AllocationsReport.TotalStack]?
  }

  /// Functions listed, most moved first.
  static let functionChangeLimit = 15
  /// Moves smaller than this many points are sampling noise in a short run.
  static let functionChangeThreshold = 0.5
  /// Allocation stacks listed, most grown first.
  static let allocationChangeLimit = 10

  /// Functions whose shares a report keeps for the differential flame graph.
  static let functionShareLimit = 5000

  /// Every program function with self time in either run, most moved first: what the HTML
  /// report's differential flame graph colours its frames by.
  static func functionShares(from baseline: Profile, to current: Profile) -> [FunctionChange] {
    func shares(_ profile: Profile) -> [String: FunctionWeight] {
      Dictionary(
        profile.topFunctions(hideSystemLibraries: true).map { ("\($0.symbol)\u{0}\($0.module)", $0) },
        uniquingKeysWith: { first, _ in first })
    }
    let before = shares(baseline)
    let after = shares(current)
    let changes = Set(before.keys).union(after.keys).compactMap { key -> FunctionChange? in
      guard let function = after[key] ?? before[key], function.isApp else { return nil }
      return FunctionChange(
        symbol: function.symbol, module: function.module, baselineSelfPercent: before[key]?.selfPercent ?? 0,
        currentSelfPercent: after[key]?.selfPercent ?? 0)
    }
    return Array(
      changes.sorted { (abs($0.changePoints), $1.symbol) > (abs($1.changePoints), $0.symbol) }
        .prefix(functionShareLimit))
  }

  /// The shares that moved by the threshold or more, most moved first.
  static func functionChanges(fromShares shares: [FunctionChange]) -> [FunctionChange] {
    Array(shares.filter { abs($0.changePoints) >= functionChangeThreshold }.prefix(functionChangeLimit))
  }

  static func functionChanges(from baseline: Profile, to current: Profile) -> [FunctionChange] {
    functionChanges(fromShares: functionShares(from: baseline, to: current))
  }

  /// Each of `current`'s persistent stacks that `baseline` had too (same frames by symbol and
  /// line, same category), with what the baseline kept live there. Stacks of `current` that
  /// share a key share the baseline's figure: the first of them carries it (a flame graph
  /// sums both on the same path).
  static func allocationStackBaselines(from baseline: AllocationsReport, to current: AllocationsReport)
    -> [AllocationStackBaseline]
  {
    stackBaselines(
      baseline.persistentStacks ?? [], current.persistentStacks ?? [],
      key: { report, stack in frameKey(report, stack.frames) + "\n" + stack.category },
      baseline, current, weights: { ($0.bytes, $0.count) })
  }

  /// The same for the totals by stack (everything allocated), matched by frames alone.
  static func totalStackBaselines(from baseline: AllocationsReport, to current: AllocationsReport)
    -> [AllocationStackBaseline]
  {
    stackBaselines(
      baseline.totalStacks ?? [], current.totalStacks ?? [], key: { report, stack in frameKey(report, stack.frames) },
      baseline, current, weights: { ($0.bytes, $0.count) })
  }

  static func unmatchedBaseline(from baseline: AllocationsReport, to current: AllocationsReport)
    -> UnmatchedBaseline
  {
    var frameIndex: [AllocationsReport.StackFrame: Int] = [:]
    var frames: [AllocationsReport.StackFrame] = []
    func reindexed(_ indices: [Int]) -> [Int] {
      baseline.frames(at: indices).map { frame in
        if let known = frameIndex[frame] { return known }
        frames.append(frame)
        frameIndex[frame] = frames.count - 1
        return frames.count - 1
      }
    }
    let persistentKeys = Set(
      (current.persistentStacks ?? []).map { frameKey(current, $0.frames) + "\n" + $0.category })
    let persistent = (baseline.persistentStacks ?? [])
      .filter { !persistentKeys.contains(frameKey(baseline, $0.frames) + "\n" + $0.category) }
      .map {
        AllocationsReport.PersistentStack(
          count: $0.count, bytes: $0.bytes, category: $0.category, frames: reindexed($0.frames))
      }
    var totals: [AllocationsReport.TotalStack]?
    if let before = baseline.totalStacks, let after = current.totalStacks {
      let totalKeys = Set(after.map { frameKey(current, $0.frames) })
      totals = before.filter { !totalKeys.contains(frameKey(baseline, $0.frames)) }
        .map { AllocationsReport.TotalStack(count: $0.count, bytes: $0.bytes, frames: reindexed($0.frames)) }
    }
    return UnmatchedBaseline(
      totals: baseline.totals, stackFrames: frames, persistentStacks: persistent, totalStacks: totals)
  }

  private static func frameKey(_ report: AllocationsReport, _ frames: [Int]) -> String {
    report.frames(at: frames).map { "\($0.symbol)@\($0.line ?? 0)" }.joined(separator: "\n")
  }

  private static func stackBaselines<Stack>(
    _ before: [Stack], _ after: [Stack], key: (AllocationsReport, Stack) -> String, _ baseline: AllocationsReport,
    _ current: AllocationsReport, weights: (Stack) -> (bytes: Int, count: Int)
  ) -> [AllocationStackBaseline] {
    var tallies: [String: (bytes: Int, count: Int)] = [:]
    for stack in before {
      let tally = tallies[key(baseline, stack), default: (0, 0)]
      let weight = weights(stack)
      tallies[key(baseline, stack)] = (tally.bytes + weight.bytes, tally.count + weight.count)
    }
    var result: [AllocationStackBaseline] = []
    for (index, stack) in after.enumerated() {
      guard let tally = tallies.removeValue(forKey: key(current, stack)) else { continue }
      result.append(AllocationStackBaseline(stack: index, bytes: tally.bytes, count: tally.count))
    }
    return result
  }

  static func allocationChanges(from baseline: AllocationsReport, to current: AllocationsReport)
    -> [AllocationChange]
  {
    struct Tally {
      var bytes = 0
      var count = 0
      var category = ""
      var site = ""
    }
    func tallies(_ report: AllocationsReport) -> [String: Tally] {
      var result: [String: Tally] = [:]
      for stack in report.persistentStacks ?? [] {
        let frames = report.frames(of: stack)
        let key = frameKey(report, stack.frames) + "\n" + stack.category
        var tally = result[key] ?? Tally()
        tally.bytes += stack.bytes
        tally.count += stack.count
        tally.category = stack.category
        tally.site = frames.programSite ?? frames.first?.symbol ?? "?"
        result[key] = tally
      }
      return result
    }
    let before = tallies(baseline)
    let after = tallies(current)
    let grown = after.compactMap { key, now -> AllocationChange? in
      let then = before[key] ?? Tally()
      guard now.bytes > then.bytes else { return nil }
      return AllocationChange(
        category: now.category, site: now.site, baselineBytes: then.bytes, currentBytes: now.bytes,
        baselineCount: then.count, currentCount: now.count)
    }
    return Array(
      grown.sorted {
        ($0.currentBytes - $0.baselineBytes, $1.site) > ($1.currentBytes - $1.baselineBytes, $0.site)
      }.prefix(allocationChangeLimit))
  }
}
