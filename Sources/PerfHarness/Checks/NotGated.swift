import Foundation

/// A figure the run measured that no check and no baseline tolerance judged (the JSON
/// report's `notGated`). A pass vouches only for what was gated: a run that passed one
/// peak-heap limit beside 549 leaked blocks said nothing of the leaks, and read as if they
/// had been judged.
public struct UngatedFigure: Codable, Sendable, Equatable {
  /// What was measured: `leaked bytes`, `retain cycles`, `peak heap`, ...
  public var figure: String
  /// Its value as measured: "549 leaked blocks (17.2 KiB)".
  public var measured: String
  /// What would gate it: a limit's key (`max-leaked-bytes`) or a baseline option.
  public var gatedBy: String

  public init(figure: String, measured: String, gatedBy: String) {
    self.figure = figure
    self.measured = measured
    self.gatedBy = gatedBy
  }
}

extension BaselineComparison.Row {
  /// Whether a tolerance judged the row: it failed, or it had a limit and both figures. A
  /// row without a limit (times without `--time-tolerance`, library types) or without a
  /// baseline figure passed only because nothing could fail it.
  public var isGated: Bool {
    !passed || (limitPercent != nil && baseline != nil && current != nil)
  }
}

extension BaselineComparison {
  /// Whether any row was judged. A comparison whose every row lacked a limit or a figure
  /// passed only because nothing could fail it: it gates nothing.
  public var judgedAnything: Bool { !passed || rows.contains(where: \.isGated) }
}

extension Report {
  /// What a reader is told went ungated: the stored `notGated`, or for a report written
  /// before the key, the same reading of its figures. Empty for a run nothing judged, whose
  /// verdict (`no checks`) already says so.
  public var notGatedFigures: [UngatedFigure] {
    notGated ?? (wasChecked ? ungatedFigures() : [])
  }

  /// Every figure the run measured that neither `checks` nor `comparison` gated, the ones a
  /// fix would act on (leaks, the program's own objects) first.
  public func ungatedFigures() -> [UngatedFigure] {
    var figures: [UngatedFigure] = []
    if let leaks { figures += ungatedLeaks(leaks) }
    if let allocations { figures += ungatedAllocations(allocations) }
    figures += ungatedTimes()
    return figures
  }

  /// A check gates its figure only when it measured it; one that could not failed instead.
  private func checked(_ key: String) -> Bool {
    checks.contains { $0.name == key && $0.actual != nil }
  }

  private func gatedRow(_ metric: String) -> Bool {
    comparison?.rows.contains { $0.metric == metric && $0.isGated } ?? false
  }

  private func ungatedLeaks(_ leaks: LeaksReport) -> [UngatedFigure] {
    var figures: [UngatedFigure] = []
    if !checked(Limit.maxLeakedBytes.key) && !gatedRow("leaked bytes") {
      figures.append(
        UngatedFigure(
          figure: "leaked bytes",
          measured: "\(leaks.leakedCount) leaked blocks (\(ByteSize(bytes: leaks.leakedBytes)))",
          gatedBy: Limit.maxLeakedBytes.key))
    }
    if !checked(Limit.maxCycles.key) && !gatedRow("retain cycles") {
      let instances = leaks.cycles.reduce(0) { $0 + $1.instances }
      figures.append(
        UngatedFigure(
          figure: "retain cycles",
          measured: leaks.cycles.isEmpty
            ? "no retain cycle"
            : "\(leaks.cycles.count) retain \(leaks.cycles.count == 1 ? "cycle" : "cycles") × \(instances)",
          gatedBy: Limit.maxCycles.key))
    }
    return figures
  }

  private func ungatedAllocations(_ allocations: AllocationsReport) -> [UngatedFigure] {
    var figures: [UngatedFigure] = []
    // With a baseline, every type's # Persistent is held by the persistent blocks' row.
    let typesGated = gatedRow("persistent blocks")
    let limitedTypes = checks.filter { $0.actual != nil && $0.name.hasPrefix(Limit.maxPersistent.key + " ") }
      .flatMap { allocations.categories(under: String($0.name.dropFirst(Limit.maxPersistent.key.count + 1))) }
      .map(\.name)
    let persisting = allocations.categories.filter {
      $0.isApp == true && $0.persistentCount > 0 && !typesGated && !limitedTypes.contains($0.name)
    }
    if !persisting.isEmpty {
      figures.append(
        UngatedFigure(
          figure: "# Persistent of the program's types",
          measured: persisting.prefix(4).map { "\($0.persistentCount) \($0.name)" }.joined(separator: ", ")
            + (persisting.count > 4 ? ", \(persisting.count - 4) more types" : ""),
          gatedBy: Limit.maxPersistent.key))
    }
    let later = allocations.generations.dropFirst()
    if let largest = later.max(by: { $0.growthBytes < $1.growthBytes }), !checked(Limit.maxGrowthPerGeneration.key),
      !gatedRow("max growth per generation (after the first)")
    {
      figures.append(
        UngatedFigure(
          figure: "growth per generation",
          measured: "largest +\(ByteSize(bytes: largest.growthBytes)) (generation \(largest.index))",
          gatedBy: Limit.maxGrowthPerGeneration.key))
    }
    if !checked(Limit.maxPeakHeap.key) && !gatedRow("peak heap") {
      figures.append(
        UngatedFigure(
          figure: "peak heap", measured: "\(ByteSize(bytes: allocations.totals.peakLiveBytes))",
          gatedBy: "\(Limit.maxPeakHeap.key), or --baseline with --peak-tolerance"))
    }
    return figures
  }

  private func ungatedTimes() -> [UngatedFigure] {
    var figures: [UngatedFigure] = []
    // No limit holds a time: only a baseline's time tolerance does.
    if !gatedRow("wall time") {
      figures.append(
        UngatedFigure(
          figure: "wall time", measured: String(format: "%.1f ms", wallTimeMilliseconds),
          gatedBy: "--baseline with --time-tolerance"))
    }
    if let coverage = timeProfile?.coveragePercent, !checked(Limit.minCoverage.key) {
      figures.append(
        UngatedFigure(
          figure: "sample coverage", measured: String(format: "%.0f %% of the CPU time", coverage),
          gatedBy: Limit.minCoverage.key))
    }
    return figures
  }
}
