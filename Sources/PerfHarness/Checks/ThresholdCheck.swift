/// Where a threshold is evaluated: a report against its limits, one check per limit.
public enum ThresholdCheck {
  /// One check per limit (a growth check per generation after the warm-up), then the
  /// recorder's losses.
  public static func evaluate(_ thresholds: Thresholds, on report: Report) -> [CheckResult] {
    var results: [CheckResult] = []
    if let limit = thresholds.maxGrowthPerGeneration {
      results += growthChecks(limit, warmUp: thresholds.warmUpGenerations, report)
    }
    for (type, limit) in thresholds.maxPersistent.sorted(by: { $0.key < $1.key }) {
      results.append(persistentCheck(type, limit: limit, report))
    }
    if let limit = thresholds.maxPeakHeap { results.append(peakHeapCheck(limit, report)) }
    if let limit = thresholds.maxLeakedBytes { results.append(leakedBytesCheck(limit, report)) }
    if let limit = thresholds.maxCycles { results.append(cyclesCheck(limit, report)) }
    if let limit = thresholds.minCoveragePercent { results.append(coverageCheck(limit, report)) }
    return results + losses(in: report)
  }

  private static func growthChecks(_ limit: ByteSize, warmUp: Int, _ report: Report) -> [CheckResult] {
    let allocations = report.allocations
    let generations = (allocations?.generations ?? []).dropFirst(warmUp)
    guard allocations != nil, !generations.isEmpty else {
      return [
        unmeasured(
          Limit.maxGrowthPerGeneration.key, limit: Double(limit.bytes),
          needs: "allocations with generations after the warm-up")
      ]
    }
    return generations.map { generation in
      let heaviest = generation.categories.first
      let site = heaviest?.allocationStack.programSite.map { " at \($0)" } ?? ""
      return CheckResult(
        name: Limit.maxGrowthPerGeneration.key, limit: Double(limit.bytes),
        actual: Double(generation.growthBytes),
        passed: generation.growthBytes <= limit.bytes,
        detail: "generation \(generation.index) '\(generation.label)'"
          + (heaviest.map { "; heaviest: \($0.name) \(ByteSize(bytes: $0.growthBytes))\(site)" } ?? ""))
    }
  }

  private static func persistentCheck(_ type: String, limit: Int, _ report: Report) -> CheckResult {
    guard let allocations = report.allocations else {
      return unmeasured("\(Limit.maxPersistent.key) \(type)", limit: Double(limit), needs: "the allocations instrument")
    }
    let matched = allocations.categories(under: type)
    if matched.isEmpty {
      // A misspelt or renamed type would otherwise pass with 0 forever.
      let resembling = allocations.namesResembling(type)
      return CheckResult(
        name: "\(Limit.maxPersistent.key) \(type)", limit: Double(limit), actual: nil, passed: false,
        detail: "matches no type the run allocated"
          + (resembling.isEmpty ? "" : "; did you mean \(resembling.joined(separator: ", "))?"))
    }
    let actual = matched.reduce(0) { $0 + $1.persistentCount }
    let transient = matched.reduce(0) { $0 + $1.transientCount }
    // Which of a family persist ("closure context (captures: …)"), heaviest first.
    let persisting = matched.filter { $0.persistentCount > 0 && matched.count > 1 }
      .sorted { $0.persistentCount > $1.persistentCount }.prefix(3)
      .map { "\($0.name) \($0.persistentCount)" }
    // Why they are still alive, where the leaks instrument read the graph: the path that
    // most of the heaviest type's instances hang from.
    // The path is the heaviest persisting type's own: in a family ("closure context") the
    // heaviest may be leaked rather than reachable, and another member's path would answer
    // a question nobody asked.
    let heaviest = matched.max { $0.persistentCount < $1.persistentCount }
    let why = report.leaks?.retainers?.first { $0.type == heaviest?.name }.flatMap { retainers in
      retainers.paths.first.map {
        "; \(retainers.type == type ? "" : retainers.type + " ")alive via \($0.chain) (\($0.instances) of \(retainers.examined))"
      }
    }
    return CheckResult(
      name: "\(Limit.maxPersistent.key) \(type)", limit: Double(limit), actual: Double(actual),
      passed: actual <= limit,
      detail: "\(actual) persistent, \(transient) transient"
        + (persisting.isEmpty ? "" : "; " + persisting.joined(separator: ", "))
        + (actual > limit
          ? why
            ?? (report.leaks == nil ? "; record with the leaks instrument to see what keeps them alive" : "")
          : ""))
  }

  private static func peakHeapCheck(_ limit: ByteSize, _ report: Report) -> CheckResult {
    guard let allocations = report.allocations else {
      return unmeasured(Limit.maxPeakHeap.key, limit: Double(limit.bytes), needs: "the allocations instrument")
    }
    return CheckResult(
      name: Limit.maxPeakHeap.key, limit: Double(limit.bytes), actual: Double(allocations.totals.peakLiveBytes),
      passed: allocations.totals.peakLiveBytes <= limit.bytes, detail: nil)
  }

  private static func leakedBytesCheck(_ limit: ByteSize, _ report: Report) -> CheckResult {
    guard let leaks = report.leaks else {
      return unmeasured(Limit.maxLeakedBytes.key, limit: Double(limit.bytes), needs: "the leaks instrument")
    }
    // Where each leaked type was made, heaviest first: the program's own frame.
    let leaked =
      (leaks.rootLeaks
      + leaks.cycles.flatMap { cycle in
        cycle.nodes.map { node in
          LeaksReport.RootLeak(
            type: node.type, bytes: node.bytes * cycle.instances, count: cycle.instances,
            allocationStack: node.allocationStack)
        }
      })
      .sorted { $0.bytes > $1.bytes }
    let sites = leaked.prefix(5).map { leak in
      "\(leak.count) \(leak.type)" + (leak.allocationStack.programSite.map { " allocated at \($0)" } ?? "")
    }
    return CheckResult(
      name: Limit.maxLeakedBytes.key, limit: Double(limit.bytes), actual: Double(leaks.leakedBytes),
      passed: leaks.leakedBytes <= limit.bytes,
      detail: "\(leaks.leakedCount) leaked blocks" + (sites.isEmpty ? "" : "; " + sites.joined(separator: "; "))
        + (leaked.count > 5 ? "; \(leaked.count - 5) more" : ""))
  }

  private static func cyclesCheck(_ limit: Int, _ report: Report) -> CheckResult {
    guard let leaks = report.leaks else {
      return unmeasured(Limit.maxCycles.key, limit: Double(limit), needs: "the leaks instrument")
    }
    let count = leaks.cycles.reduce(0) { $0 + $1.instances }
    // Each cycle by its members, each member where the program made it.
    let described = leaks.cycles.prefix(3).map { cycle in
      cycle.nodes.map { node in
        node.type + (node.allocationStack.programSite.map { " (allocated at \($0))" } ?? "")
      }.joined(separator: " -> ") + " x\(cycle.instances)"
    }
    return CheckResult(
      name: Limit.maxCycles.key, limit: Double(limit), actual: Double(count), passed: count <= limit,
      detail: described.isEmpty
        ? nil
        : described.joined(separator: "; ")
          + (leaks.cycles.count > 3 ? "; \(leaks.cycles.count - 3) more cycles" : ""))
  }

  private static func coverageCheck(_ limit: Double, _ report: Report) -> CheckResult {
    guard let profile = report.timeProfile, let coverage = profile.coveragePercent else {
      return unmeasured(Limit.minCoverage.key, limit: limit, needs: "the Time Profiler on the cpu clock")
    }
    let unsampled = (profile.unsampled ?? []).map { "\($0.name) [\($0.threadID)]: \($0.reason)" }
    return CheckResult(
      name: Limit.minCoverage.key, limit: limit, actual: coverage, passed: coverage >= limit,
      detail: String(
        format: "%.0f ms sampled of %.0f ms CPU time", profile.totalWeightMilliseconds,
        profile.cpuMilliseconds ?? 0)
        + (unsampled.isEmpty ? "" : "; unsampled: " + unsampled.prefix(5).joined(separator: ", ")))
  }

  /// Share of samples a profile may lose before `--check` fails.
  public static let lostSamplesPercentLimit = 1.0

  /// What the recorder counted as lost fails the gate: figures missing data can pass any
  /// limit (a heap whose frees lost their types read 0 persistent with 781 MB live).
  public static func losses(in report: Report) -> [CheckResult] {
    var results: [CheckResult] = []
    if let allocations = report.allocations {
      let lost = allocations.lost.blocks + allocations.lost.freedCategories + (report.leaks?.freesNotLogged ?? 0)
      results.append(
        CheckResult(
          name: "lost-allocation-records", limit: 0, actual: Double(lost), passed: lost == 0,
          detail: lost == 0
            ? nil
            : "\(allocations.lost.blocks) blocks not tracked, \(allocations.lost.freedCategories) frees with their type lost"
              + ((report.leaks?.freesNotLogged ?? 0) > 0
                ? ", \(report.leaks?.freesNotLogged ?? 0) frees during the leak scan not logged" : "")
              + ": the allocation figures are incomplete"))
    }
    if let leaks = report.leaks {
      // What the scan could not judge: a thread it could not read may hold the only
      // reference to a block (a false leak), and an address a dangling pointer named that a
      // new block got anyway may keep a leak looking reachable (a missed one).
      let notAvoided = leaks.danglingAddresses?.notAvoided ?? 0
      let unjudged = leaks.unscannedThreads + notAvoided
      var reasons: [String] = []
      if leaks.unscannedThreads > 0 { reasons.append("\(leaks.unscannedThreads) threads could not be read") }
      if notAvoided > 0 { reasons.append("\(notAvoided) new blocks got an address a dangling pointer names") }
      results.append(
        CheckResult(
          name: "leak-scan-incomplete", limit: 0, actual: Double(unjudged), passed: unjudged == 0,
          detail: reasons.isEmpty ? nil : reasons.joined(separator: ", ") + ": the leak verdict may be wrong"))
    }
    if let profile = report.timeProfile {
      let recorded = profile.sampleCount + profile.lostSamples
      let percent = recorded == 0 ? 0 : Double(profile.lostSamples) / Double(recorded) * 100
      results.append(
        CheckResult(
          name: "lost-samples-percent", limit: lostSamplesPercentLimit, actual: percent,
          passed: percent <= lostSamplesPercentLimit,
          detail: profile.lostSamples == 0 ? nil : "\(profile.lostSamples) of \(recorded) samples lost"))
    }
    return results
  }

  /// A limit with nothing to measure it against fails: a gate that silently passes is worse.
  private static func unmeasured(_ name: String, limit: Double, needs: String) -> CheckResult {
    CheckResult(name: name, limit: limit, actual: nil, passed: false, detail: "not measured: needs \(needs)")
  }
}
