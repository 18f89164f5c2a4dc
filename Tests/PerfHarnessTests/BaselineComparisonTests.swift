import Testing

@testable import PerfHarness

@Suite("Baseline comparison")
struct BaselineComparisonTests {
  private func report(
    persistentBytes: Int = 100_000, persistentCount: Int = 300, peak: Int = 1_000_000, types: [String: Int] = [:],
    leakedBytes: Int? = nil, leakedCount: Int? = nil, cycleInstances: Int = 0,
    wallTime: Double = 100, allocations: Bool = true
  ) -> Report {
    var report = Report.crashed(
      scenario: "sample", variant: "starter", iterations: 3, instruments: [.allocations], error: "",
      wallTimeMilliseconds: wallTime, crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: []))
    report.status = .passed
    report.error = nil
    report.crash = nil
    if allocations {
      report.allocations = AllocationsReport(
        mode: "countsOnly", durationMilliseconds: wallTime,
        totals: .init(
          totalAllocations: 5000, totalBytes: 9_000_000, persistentCount: persistentCount,
          persistentBytes: persistentBytes,
          transientCount: 4700, transientBytes: 8_900_000, peakLiveBytes: peak, liveBytesAtEnd: persistentBytes),
        categories: types.map { name, count in
          .init(
            name: name, kind: "swiftClass", isApp: name.hasPrefix("App."), persistentCount: count, transientCount: 0,
            totalCount: count,
            persistentBytes: count * 48, totalBytes: count * 48)
        } + [
          .init(
            name: "Malloc 64 Bytes", kind: "malloc", isApp: false, persistentCount: 10, transientCount: 9,
            totalCount: 19,
            persistentBytes: 640, totalBytes: 1216)
        ],
        generations: [], timeline: [],
        lost: .init(blocks: 0, stacks: 0, freedCategories: 0, timelinePoints: 0),
        overhead: .init(blockTableBytes: 0, stackTableBytes: 0, bytesPerLiveBlock: 0))
    }
    if let leakedBytes {
      report.leaks = LeaksReport(
        leakedCount: leakedCount ?? (leakedBytes == 0 ? 0 : 1), leakedBytes: leakedBytes, rootLeaks: [],
        indirectLeakCount: 0, indirectLeakBytes: 0, indirectLeaks: [],
        cycles: cycleInstances == 0
          ? []
          : [
            .init(
              nodes: [.init(type: "App.Screen", bytes: 48, allocationStack: [])], edges: [], instances: cycleInstances,
              neighbors: [], neighborEdges: [])
          ],
        unscannedThreads: 0, threadsScanned: 1,
        scanMilliseconds: 1, blocksScanned: 10, edgeCount: 5, suppressedCount: 0, suppressedBytes: 0)
    }
    return report
  }

  private func row(_ comparison: BaselineComparison, _ metric: String) throws -> BaselineComparison.Row {
    try #require(comparison.rows.first { $0.metric == metric }, "\(comparison.rows.map(\.metric))")
  }

  @Test("a run identical to its baseline passes every gated figure")
  func identical() {
    let comparison = BaselineComparison.compare(
      report(types: ["App.Screen": 1], leakedBytes: 0), with: report(types: ["App.Screen": 1], leakedBytes: 0),
      baselinePath: "base.json")
    #expect(comparison.passed)
    #expect(comparison.rows.contains { $0.metric == "persistent bytes" && $0.limitPercent == 10 })
    #expect(!comparison.rows.contains { $0.metric.hasPrefix("# Persistent") }, "unchanged types get no row")
  }

  @Test(
    "byte figures fail beyond the tolerance and the minimum increase",
    arguments: [(105_000, true), (120_000, false), (102_000, true)])
  func bytesTolerance(current: Int, passes: Bool) throws {
    let comparison = BaselineComparison.compare(
      report(persistentBytes: current), with: report(persistentBytes: 100_000), baselinePath: "base.json")
    let row = try row(comparison, "persistent bytes")
    #expect(row.passed == passes)
    #expect(comparison.passed == passes)
    #expect(abs((row.changePercent ?? 0) - Double(current - 100_000) / 1000) < 1e-9)
  }

  @Test("an increase within the tolerance but below the minimum bytes passes")
  func minimumBytes() throws {
    let comparison = BaselineComparison.compare(
      report(persistentBytes: 13_000), with: report(persistentBytes: 10_000), baselinePath: "base.json",
      tolerances: .init(percent: 10, minimumBytes: 4096))
    #expect(try row(comparison, "persistent bytes").passed)
  }

  @Test(
    "block counts fail beyond the tolerance and the minimum count (64 blocks with the default 4 KiB)",
    arguments: [(119, 107, true), (171, 107, true), (172, 107, false), (1_000, 800, false)])
  func minimumCount(current: Int, baseline: Int, passes: Bool) throws {
    let comparison = BaselineComparison.compare(
      report(persistentCount: current), with: report(persistentCount: baseline), baselinePath: "base.json")
    #expect(try row(comparison, "persistent blocks").passed == passes)
  }

  @Test("the block allowance follows the byte allowance, unless given", arguments: [(64 << 10, 1_024), (0, 0)])
  func minimumCountFollowsBytes(minimumBytes: Int, count: Int) {
    #expect(ComparisonTolerances(minimumBytes: minimumBytes).minimumCount == count)
    #expect(ComparisonTolerances(minimumBytes: minimumBytes, minimumCount: 5).minimumCount == 5)
  }

  @Test("a type that now persists fails by name; one that persists less does not")
  func persistentTypes() throws {
    let comparison = BaselineComparison.compare(
      report(types: ["App.Screen": 3, "App.Model": 1, "Foundation.NSLock": 2]), with: report(types: ["App.Model": 4]),
      baselinePath: "base.json")
    let screen = try row(comparison, "# Persistent App.Screen")
    #expect(!screen.passed)
    #expect(screen.baseline == 0 && screen.current == 3)
    #expect(try row(comparison, "# Persistent App.Model").passed)
    let library = try row(comparison, "# Persistent Foundation.NSLock")
    #expect(library.passed && library.limitPercent == nil, "library types are shown, not gated")
    #expect(!comparison.rows.contains { $0.metric.contains("Malloc") }, "size classes are not types")
    #expect(!comparison.passed)
  }

  @Test("any new leaked byte fails, whatever the minimum increase")
  func leaks() throws {
    let comparison = BaselineComparison.compare(
      report(leakedBytes: 48), with: report(leakedBytes: 0), baselinePath: "base.json")
    #expect(try !row(comparison, "leaked bytes").passed)
    #expect(try row(comparison, "retain cycles").passed)
  }

  @Test("one more leaked block or instance of the program's own class fails, within any tolerance")
  func noAllowance() throws {
    let comparison = BaselineComparison.compare(
      report(types: ["App.Screen": 11], leakedBytes: 1050), with: report(types: ["App.Screen": 10], leakedBytes: 1000),
      baselinePath: "base.json", tolerances: .init(percent: 50, minimumBytes: 1 << 20))
    let screen = try row(comparison, "# Persistent App.Screen")
    #expect(!screen.passed && screen.limitPercent == 0, "10 -> 11 is +10 %, and still a regression")
    #expect(try !row(comparison, "leaked bytes").passed)
    #expect(!comparison.passed)
    let fewer = BaselineComparison.compare(
      report(types: ["App.Screen": 9], leakedBytes: 900), with: report(types: ["App.Screen": 10], leakedBytes: 1000),
      baselinePath: "base.json")
    #expect(fewer.passed)
  }

  @Test("one more retain cycle or leaked block than the baseline fails, within any tolerance")
  func oneMoreCycle() throws {
    let tolerances = ComparisonTolerances(percent: 50, minimumBytes: 1 << 20)
    let cycles = BaselineComparison.compare(
      report(leakedBytes: 960, leakedCount: 20, cycleInstances: 11),
      with: report(leakedBytes: 960, leakedCount: 20, cycleInstances: 10), baselinePath: "base.json",
      tolerances: tolerances)
    let row = try row(cycles, "retain cycles")
    #expect(!row.passed && row.limitPercent == 0, "10 -> 11 cycles is +10 %, and still a regression")
    #expect(!cycles.passed)
    let blocks = BaselineComparison.compare(
      report(leakedBytes: 960, leakedCount: 21), with: report(leakedBytes: 960, leakedCount: 20),
      baselinePath: "base.json", tolerances: tolerances)
    #expect(try !self.row(blocks, "leaked blocks").passed)
    let same = BaselineComparison.compare(
      report(leakedBytes: 960, leakedCount: 20, cycleInstances: 10),
      with: report(leakedBytes: 960, leakedCount: 20, cycleInstances: 10), baselinePath: "base.json")
    #expect(same.passed, "\(same.rows.filter { !$0.passed })")
  }

  @Test("a baseline with other iterations or instruments is named, and fails unless allowed")
  func differentSetup() throws {
    var current = report()
    current.scenario.iterations = 5
    current.scenario.instruments = [.allocations, .leaks]
    let comparison = BaselineComparison.compare(current, with: report(), baselinePath: "base.json")
    let iterations = try #require(comparison.rows.first { $0.metric.hasPrefix("iterations") })
    #expect(iterations.metric == "iterations: 5 (baseline: 3)" && !iterations.passed)
    let instruments = try #require(comparison.rows.first { $0.metric.hasPrefix("instruments") })
    #expect(instruments.metric == "instruments: allocations,leaks (baseline: allocations)" && !instruments.passed)
    #expect(!comparison.passed)
    let allowed = BaselineComparison.compare(
      current, with: report(), baselinePath: "base.json", tolerances: .init(allowsDifferentSetup: true))
    #expect(allowed.passed, "\(allowed.rows.filter { !$0.passed })")
    #expect(allowed.rows.contains { $0.metric.hasPrefix("iterations") })
  }

  @Test(
    "another scenario, variant, iterations or instruments is a setup difference, failing unless allowed",
    arguments: [
      ("scenario", "scenario: other (baseline: sample)"), ("variant", "variant: fixed (baseline: starter)"),
      ("iterations", "iterations: 5 (baseline: 3)"),
      ("instruments", "instruments: allocations,time (baseline: allocations)"),
    ])
  func setupDifference(field: String, metric: String) throws {
    var current = report()
    switch field {
    case "scenario": current.scenario.name = "other"
    case "variant": current.scenario.variant = "fixed"
    case "iterations": current.scenario.iterations = 5
    default: current.scenario.instruments = [.time, .allocations]
    }
    let differences = BaselineComparison.setupDifferences(current.scenario, baseline: report().scenario)
    #expect(differences.map(\.name) == [field])
    let refused = BaselineComparison.compare(current, with: report(), baselinePath: "base.json")
    let row = try row(refused, metric)
    #expect(!row.passed && row.unit == "setup" && !refused.passed)
    #expect(row.detail?.contains("--allow-different-setup") == true)
    let allowed = BaselineComparison.compare(
      current, with: report(), baselinePath: "base.json", tolerances: .init(allowsDifferentSetup: true))
    #expect(try self.row(allowed, metric).passed && allowed.passed)
  }

  /// A baseline whose allocations section was removed passed every memory gate: the rows
  /// said "ok" with nothing to hold the figures against.
  @Test("a section the baseline lacks is not gated: its rows and the comparison say so, never 0")
  func sectionMissingInTheBaseline() throws {
    let current = report(types: ["App.Screen": 3], leakedBytes: 0)
    for (baseline, section) in [(report(leakedBytes: 0, allocations: false), "allocations"), (report(), "leaks")] {
      let comparison = BaselineComparison.compare(current, with: baseline, baselinePath: "base.json")
      let note = try row(comparison, "\(section): not in the baseline")
      #expect(note.unit == "setup" && note.passed)
      #expect(note.detail?.hasPrefix("the baseline has no \(section) section: ") == true, "\(note)")
      #expect(note.detail?.hasSuffix(" not gated") == true, "\(note)")
      let figure = try row(comparison, section == "leaks" ? "leaked bytes" : "persistent bytes")
      #expect(figure.baseline == nil && figure.limitPercent == nil && figure.passed)
      #expect(figure.detail == "the baseline has no such figure (not gated)")
    }
    let complete = BaselineComparison.compare(current, with: current, baselinePath: "base.json")
    #expect(!complete.rows.contains { $0.metric.hasSuffix("not in the baseline") })
  }

  @Test("a baseline with no generation after the warm-up has no growth figure, rather than 0")
  func noGenerationsInTheBaseline() throws {
    var current = report()
    current.allocations?.generations = (0..<3).map { index in
      AllocationsReport.Generation(
        index: index, label: "g\(index)", startMilliseconds: 0, endMilliseconds: 1, growthBytes: 100_000,
        growthCount: 10, liveBytes: 0, categories: [])
    }
    let comparison = BaselineComparison.compare(current, with: report(), baselinePath: "base.json")
    let growth = try row(comparison, "max growth per generation (after the first)")
    #expect(growth.baseline == nil && growth.current == 100_000 && growth.passed && growth.limitPercent == nil)
  }

  @Test("a gate asked for by name that the baseline cannot serve is named; default gates are not")
  func explicitGatesLacking() {
    let noTime = report()
    let both = ComparisonTolerances(timePercent: 10, peakPercent: 10)
    #expect(
      BaselineComparison.explicitGatesLacking(in: noTime, instruments: [.time, .allocations], tolerances: both)
        == ["--time-tolerance gates the sampled time, and the baseline has no time profile"])
    #expect(
      BaselineComparison.explicitGatesLacking(
        in: report(allocations: false), instruments: [.allocations], tolerances: both)
        == ["--peak-tolerance gates the peak heap, and the baseline has no allocations section"])
    #expect(BaselineComparison.explicitGatesLacking(in: noTime, instruments: [.allocations], tolerances: both).isEmpty)
    #expect(
      BaselineComparison.explicitGatesLacking(
        in: report(allocations: false), instruments: [.time, .allocations], tolerances: .init()
      ).isEmpty)
  }

  @Test("a figure the baseline measured and this run did not fails")
  func missingMeasurement() throws {
    let comparison = BaselineComparison.compare(
      report(allocations: false), with: report(), baselinePath: "base.json")
    let persistent = try row(comparison, "persistent bytes")
    #expect(!persistent.passed)
    #expect(persistent.detail == "not measured in this run")
    #expect(!comparison.passed)
  }

  @Test("the peak heap is shown, and gated only with a peak tolerance")
  func peakHeap() throws {
    // 3.63 -> 4.66 MB: two runs of one unchanged program whose background work piled up differently.
    let higher = report(peak: 4_658_000)
    let informational = BaselineComparison.compare(higher, with: report(peak: 3_633_000), baselinePath: "b")
    let peak = try row(informational, "peak heap")
    #expect(peak.passed && peak.limitPercent == nil)
    #expect(abs((peak.changePercent ?? 0) - 28.21) < 0.01)
    #expect(informational.passed && informational.peakTolerancePercent == nil)

    let gated = BaselineComparison.compare(
      higher, with: report(peak: 3_633_000), baselinePath: "b", tolerances: .init(peakPercent: 25))
    #expect(try !row(gated, "peak heap").passed)
    #expect(!gated.passed && gated.peakTolerancePercent == 25)
    let within = BaselineComparison.compare(
      higher, with: report(peak: 3_633_000), baselinePath: "b", tolerances: .init(peakPercent: 30))
    #expect(within.passed)
  }

  @Test("times are shown, and gated only with a time tolerance")
  func times() throws {
    let slower = report(wallTime: 300)
    let informational = BaselineComparison.compare(slower, with: report(wallTime: 100), baselinePath: "b")
    let wall = try row(informational, "wall time")
    #expect(wall.passed && wall.limitPercent == nil && wall.changePercent == 200)
    #expect(informational.passed)
    let gated = BaselineComparison.compare(
      slower, with: report(wallTime: 100), baselinePath: "b", tolerances: .init(timePercent: 50))
    #expect(try !row(gated, "wall time").passed)
    #expect(!gated.passed)
  }

  @Test("private types keep one name across runs: the ASLR address is dropped")
  func stableTypeNames() {
    #expect(
      SwiftMetadataNamer.withoutAddresses(
        "Swift.Dictionary<Foundation.(unknown context at $7fb84e7c9920).Box, (unknown context at $7f13a49c9990).Key>")
        == "Swift.Dictionary<Foundation.(unknown context).Box, (unknown context).Key>")
    #expect(SwiftMetadataNamer.withoutAddresses("App.Screen") == "App.Screen")
  }

  /// Two runs of one program: the filter now takes 70 % of the samples instead of 30 %.
  private func profile(filterShare: Int) -> Profile {
    let frames = [
      ProfileFrame(name: "App.main()", module: "App", isApp: true),
      ProfileFrame(name: "App.filter(_:)", module: "App", isApp: true),
      ProfileFrame(name: "App.decode(_:)", module: "App", isApp: true),
      ProfileFrame(name: "memcpy", module: "libc.so.6", isApp: false),
    ]
    let samples =
      Array(repeating: ProfileSample(thread: 0, weight: 1, stack: [0, 1, 3]), count: filterShare)
      + Array(repeating: ProfileSample(thread: 0, weight: 1, stack: [0, 2]), count: 100 - filterShare)
    return Profile(
      frames: frames, threads: [ProfileThread(name: "Main Thread", isMain: true, threadID: 1)], samples: samples)
  }

  @Test("the program's functions whose share of the samples moved, system time charged to their caller")
  func functionChanges() {
    let changes = BaselineComparison.functionChanges(from: profile(filterShare: 30), to: profile(filterShare: 70))
    #expect(
      changes.map(\.symbol) == ["App.decode(_:)", "App.filter(_:)"]
        || changes.map(\.symbol) == ["App.filter(_:)", "App.decode(_:)"])
    let filter = changes.first { $0.symbol == "App.filter(_:)" }
    #expect(filter?.baselineSelfPercent == 30 && filter?.currentSelfPercent == 70 && filter?.changePoints == 40)
    #expect(!changes.contains { $0.symbol == "memcpy" }, "memcpy's time is App.filter's under Hide System Libraries")
    #expect(BaselineComparison.functionChanges(from: profile(filterShare: 30), to: profile(filterShare: 30)).isEmpty)
  }

  @Test("a failing byte figure names the allocation stack that grew most")
  func allocationStackThatGrew() throws {
    func withStacks(_ cacheBytes: Int, persistentBytes: Int) -> Report {
      var run = report(persistentBytes: persistentBytes)
      run.allocations?.stackFrames = [
        .init(symbol: "malloc", module: "CPerfAlloc", isApp: false),
        .init(symbol: "App.Cache.store(_:)", module: "App", file: "/src/Cache.swift", line: 12, isApp: true),
        .init(symbol: "App.Log.append(_:)", module: "App", file: "/src/Log.swift", line: 3, isApp: true),
      ]
      run.allocations?.persistentStacks = [
        .init(count: cacheBytes / 1000, bytes: cacheBytes, category: "App.Entry", frames: [0, 1]),
        .init(count: 2, bytes: 2000, category: "Malloc 1.00 KiB", frames: [0, 2]),
      ]
      return run
    }
    let comparison = BaselineComparison.compare(
      withStacks(500_000, persistentBytes: 600_000), with: withStacks(100_000, persistentBytes: 200_000),
      baselinePath: "base.json")
    let grown = try #require(comparison.allocationChanges)
    #expect(grown.count == 1, "the log's stack did not change")
    #expect(grown.first?.site == "App.Cache.store(_:) (Cache.swift:12)" && grown.first?.currentCount == 500)
    let bytes = try row(comparison, "persistent bytes")
    #expect(
      !bytes.passed && (bytes.detail ?? "").contains("grew most at App.Cache.store(_:) (Cache.swift:12)"), "\(bytes)")
  }

  @Test("each of the run's allocation stacks the baseline had carries the baseline's figure, by frames and category")
  func allocationStackBaselines() throws {
    func run(_ stacks: [(count: Int, category: String, frames: [Int])]) -> Report {
      var run = report()
      run.allocations?.stackFrames = [
        .init(symbol: "swift_allocObject", module: "libswiftCore.so", isApp: false),
        .init(symbol: "App.Cache.store(_:)", module: "App", file: "/src/Cache.swift", line: 12, isApp: true),
        .init(symbol: "App.Router.push(_:)", module: "App", file: "/src/Router.swift", line: 40, isApp: true),
      ]
      run.allocations?.persistentStacks = stacks.map {
        .init(count: $0.count, bytes: $0.count * 48, category: $0.category, frames: $0.frames)
      }
      return run
    }
    let baseline = run([(10, "App.Entry", [0, 1]), (1, "App.Screen", [0, 2]), (7, "App.Gone", [0, 2])])
    let current = run([(2, "App.Screen", [0, 2]), (400, "App.Entry", [0, 1]), (5, "App.New", [0, 1])])
    let comparison = BaselineComparison.compare(current, with: baseline, baselinePath: "base.json")
    let baselines = try #require(comparison.allocationStackBaselines)
    #expect(
      baselines == [
        .init(stack: 0, bytes: 48, count: 1), .init(stack: 1, bytes: 480, count: 10),
      ], "the new stack has no baseline; the baseline's gone stack has no place in this run")
  }

  @Test("the totals by stack are matched by frames (no category): each of this run's with the baseline's total")
  func totalStackBaselines() throws {
    func run(_ stacks: [(count: Int, frames: [Int])]) -> Report {
      var run = report()
      run.allocations?.stackFrames = [
        .init(symbol: "swift_allocObject", module: "libswiftCore.so", isApp: false),
        .init(symbol: "App.Cache.store(_:)", module: "App", file: "/src/Cache.swift", line: 12, isApp: true),
        .init(symbol: "App.Router.push(_:)", module: "App", file: "/src/Router.swift", line: 40, isApp: true),
        .init(symbol: "App.Parser.parse(_:)", module: "App", file: "/src/Parser.swift", line: 7, isApp: true),
      ]
      run.allocations?.persistentStacks = []
      run.allocations?.totalStacks = stacks.map { .init(count: $0.count, bytes: $0.count * 32, frames: $0.frames) }
      return run
    }
    let baseline = run([(1000, [0, 1]), (30, [0, 2]), (9, [0, 3])])
    let current = run([(40, [0, 2]), (5000, [0, 1]), (3, [0, 0, 3, 3])])
    let comparison = BaselineComparison.compare(current, with: baseline, baselinePath: "base.json")
    #expect(
      comparison.totalStackBaselines == [
        .init(stack: 0, bytes: 960, count: 30), .init(stack: 1, bytes: 32_000, count: 1000),
      ])
    var withoutTotals = baseline
    withoutTotals.allocations?.totalStacks = nil
    #expect(
      BaselineComparison.compare(current, with: withoutTotals, baselinePath: "base.json").totalStackBaselines == nil)
  }

  @Test("a failing count names the allocation stack whose count grew most, of that type for a type's row")
  func allocationStackWhoseCountGrew() throws {
    func run(entries: Int, screens: Int) -> Report {
      var run = report(persistentCount: 100 + entries + screens, types: ["App.Screen": screens, "App.Entry": entries])
      run.allocations?.stackFrames = [
        .init(symbol: "swift_allocObject", module: "libswiftCore.so", isApp: false),
        .init(symbol: "App.Cache.store(_:)", module: "App", file: "/src/Cache.swift", line: 12, isApp: true),
        .init(symbol: "App.Router.push(_:)", module: "App", file: "/src/Router.swift", line: 40, isApp: true),
      ]
      run.allocations?.persistentStacks = [
        .init(count: entries, bytes: entries * 48, category: "App.Entry", frames: [0, 1]),
        .init(count: screens, bytes: screens * 48, category: "App.Screen", frames: [0, 2]),
      ]
      return run
    }
    let comparison = BaselineComparison.compare(
      run(entries: 400, screens: 3), with: run(entries: 10, screens: 1), baselinePath: "base.json")
    let blocks = try row(comparison, "persistent blocks")
    #expect(
      !blocks.passed
        && (blocks.detail ?? "").contains("grew most at App.Cache.store(_:) (Cache.swift:12): +390 App.Entry"),
      "\(blocks)")
    let screens = try row(comparison, "# Persistent App.Screen")
    #expect(
      !screens.passed
        && (screens.detail ?? "").contains("grew most at App.Router.push(_:) (Router.swift:40): +2 App.Screen"),
      "\(screens)")
  }

  /// The baseline's own stacks used to be dropped: a flame graph summing only the matched
  /// ones said +7.95 MiB where the baseline had kept most of its bytes elsewhere.
  @Test(
    "the baseline's stacks this run lacks are kept with their frames: matched and unmatched make the whole baseline")
  func unmatchedBaseline() throws {
    func run(_ stacks: [(count: Int, category: String, frames: [Int])], totals: [(count: Int, frames: [Int])]) -> Report
    {
      var run = report()
      run.allocations?.stackFrames = [
        .init(symbol: "swift_allocObject", module: "libswiftCore.so", isApp: false),
        .init(symbol: "App.Cache.store(_:)", module: "App", file: "/src/Cache.swift", line: 12, isApp: true),
        .init(symbol: "App.Router.push(_:)", module: "App", file: "/src/Router.swift", line: 40, isApp: true),
      ]
      run.allocations?.persistentStacks = stacks.map {
        .init(count: $0.count, bytes: $0.count * 48, category: $0.category, frames: $0.frames)
      }
      run.allocations?.totalStacks = totals.map { .init(count: $0.count, bytes: $0.count * 32, frames: $0.frames) }
      return run
    }
    let baseline = run(
      [(10, "App.Entry", [0, 1]), (1, "App.Screen", [0, 2]), (7, "App.Gone", [0, 2])],
      totals: [(1000, [0, 1]), (30, [0, 2])])
    let current = run([(2, "App.Screen", [0, 2]), (400, "App.Entry", [0, 1])], totals: [(5000, [0, 1])])
    let comparison = BaselineComparison.compare(current, with: baseline, baselinePath: "base.json")
    let unmatched = try #require(comparison.unmatchedBaseline)
    #expect(unmatched.totals == baseline.allocations?.totals)
    #expect(unmatched.persistentStacks.map(\.category) == ["App.Gone"])
    #expect(unmatched.persistentStacks.map(\.bytes) == [7 * 48])
    #expect(unmatched.totalStacks?.map(\.count) == [30])
    // Each stack's frames index the comparison's own table, the baseline's frames as they were.
    let gone = try #require(unmatched.persistentStacks.first)
    #expect(gone.frames.map { unmatched.stackFrames[$0].symbol } == ["swift_allocObject", "App.Router.push(_:)"])
    let matched = (comparison.allocationStackBaselines ?? []).reduce(0) { $0 + $1.bytes }
    let whole = (baseline.allocations?.persistentStacks ?? []).reduce(0) { $0 + $1.bytes }
    #expect(matched + unmatched.persistentStacks.reduce(0) { $0 + $1.bytes } == whole)
  }

  @Test("a row is gated when a tolerance judged it: a limit and both figures, or a failure")
  func gatedRows() {
    let comparison = BaselineComparison.compare(
      report(persistentBytes: 100_000, peak: 1_000_000, wallTime: 100),
      with: report(persistentBytes: 100_000, peak: 400_000, wallTime: 50), baselinePath: "base.json")
    let gated = Dictionary(comparison.rows.map { ($0.metric, $0.isGated) }, uniquingKeysWith: { first, _ in first })
    #expect(gated["persistent bytes"] == true)
    #expect(gated["peak heap"] == false, "no --peak-tolerance")
    #expect(gated["wall time"] == false, "no --time-tolerance")
    let timed = BaselineComparison.compare(
      report(wallTime: 100), with: report(wallTime: 50), baselinePath: "base.json",
      tolerances: .init(timePercent: 10))
    #expect(timed.rows.first { $0.metric == "wall time" }.map { $0.isGated && !$0.passed } == true)
  }
}
