import Foundation
import Testing

@testable import PerfHarness

@Suite("Thresholds files and sizes")
struct ThresholdsTests {
  @Test(
    "sizes in the accepted forms",
    arguments: [
      ("0", 0), ("512 B", 512), ("512B", 512), ("64KB", 64_000), ("64 KiB", 65_536), ("1.5 MiB", 1_572_864),
      ("2MB", 2_000_000), ("1 GiB", 1_073_741_824),
    ])
  func sizes(text: String, bytes: Int) {
    #expect(ByteSize(parsing: text)?.bytes == bytes)
  }

  @Test(
    "malformed sizes are refused", arguments: ["", "12", "KB", "-1KB", "1e3KB", "12XB", "1.2.3MB", "64 kb", "nan MB"])
  func badSizes(text: String) {
    #expect(ByteSize(parsing: text) == nil)
  }

  /// A check stores its limit in the report as a Double, and a reader refuses any number
  /// past 10^15: Int.max became 2^63 there and trapped the text summary converting it back.
  @Test(
    "a limit past what a report holds is refused in a file, naming the key, the value and the range",
    arguments: [
      ("max-cycles: 1000000000000001\n", "t.yaml:1: max-cycles: '1000000000000001' is too large"),
      (
        "warm-up-generations: 9223372036854775807\n",
        "t.yaml:1: warm-up-generations: '9223372036854775807' is too large"
      ),
      ("max-leaked-bytes: 1000000000000001 B\n", "t.yaml:1: max-leaked-bytes: '1000000000000001 B' is too large"),
      ("max-peak-heap: 9223372036854775807 B\n", "t.yaml:1: max-peak-heap: '9223372036854775807 B' is too large"),
      ("max-growth-per-generation: 1000001 GB\n", "t.yaml:1: max-growth-per-generation: '1000001 GB' is too large"),
      (
        "max-persistent:\n  App.Screen: 9223372036854775807\n",
        "t.yaml:2: max-persistent: App.Screen: '9223372036854775807' is too large"
      ),
    ])
  func limitsPastTheReportsRange(text: String, message: String) {
    #expect {
      try Thresholds.parse(text, path: "t.yaml")
    } throws: { error in
      "\(error)".hasPrefix(message) && "\(error)".contains("; accepted: a ")
        && "\(error)".contains("from 0 to \(Limit.largestValue)")
    }
  }

  @Test("the largest limit a report holds is accepted, in a file and as a flag's value")
  func largestLimit() throws {
    let largest = Limit.largestValue
    let thresholds = try Thresholds.parse(
      "max-cycles: \(largest)\nmax-leaked-bytes: \(largest) B\nmax-persistent:\n  App.Screen: \(largest)\n",
      path: "t.yaml")
    #expect(thresholds.maxCycles == largest && thresholds.maxLeakedBytes?.bytes == largest)
    #expect(thresholds.maxPersistent == ["App.Screen": largest])
    #expect(Limit.maxPersistent.parse("App.Screen=\(largest)") == .typeCount("App.Screen", largest))
    #expect(Limit.maxPersistent.parse("App.Screen=\(largest + 1)") == nil)
    #expect(Limit.maxGrowthPerGeneration.parse("1000000 GB") == .size(ByteSize(bytes: largest)))
    // Exact as the Double the report stores, so it converts back without trapping.
    #expect(Int(exactly: Double(largest)) == largest)
  }

  @Test("a full file")
  func fullFile() throws {
    let thresholds = try Thresholds.parse(
      """
      # comment
      max-growth-per-generation: 64 KB
      warm-up-generations: 2
      max-leaked-bytes: 0
      max-cycles: 0
      max-persistent:
        App.Screen: 1
        closure context: 0
      max-peak-heap: 10 MiB
      """, path: "t.yaml")
    #expect(thresholds.maxGrowthPerGeneration?.bytes == 64_000)
    #expect(thresholds.warmUpGenerations == 2)
    #expect(thresholds.maxLeakedBytes?.bytes == 0)
    #expect(thresholds.maxCycles == 0)
    #expect(thresholds.maxPersistent == ["App.Screen": 1, "closure context": 0])
    #expect(thresholds.maxPeakHeap?.bytes == 10 * 1024 * 1024)
    #expect(thresholds.requiredInstruments == [.allocations, .leaks])
  }

  @Test(
    "malformed files name the line and the field",
    arguments: [
      ("max-growth-per-generation: lots\n", 1, "max-growth-per-generation"),
      ("max-cycles: 0\nmax-cycles2: 1\n", 2, "unknown key"),
      ("max-persistent: 3\n", 1, "max-persistent"),
      ("max-persistent:\n  App.Screen: many\n", 2, "max-persistent"),
      ("warm-up-generations: -1\n", 1, "warm-up-generations"),
      ("- a list\n", 1, "expected a mapping"),
    ])
  func badFiles(text: String, line: Int, mentions: String) {
    do {
      _ = try Thresholds.parse(text, path: "bad.yaml")
      Issue.record("accepted \(text)")
    } catch let error as ThresholdsFileError {
      #expect(error.line == line, "\(error)")
      #expect(error.description.hasPrefix("bad.yaml:\(line):"))
      #expect(error.description.contains(mentions), "\(error)")
    } catch {
      Issue.record("unexpected \(error)")
    }
  }

  @Test("YAML that does not parse is refused with the file named")
  func notYAML() {
    #expect(throws: ThresholdsFileError.self) { try Thresholds.parse("a: [1, 2\n", path: "x.yaml") }
  }

  @Test("flags override the file, key by key")
  func overrides() {
    var file = Thresholds()
    file.maxGrowthPerGeneration = ByteSize(bytes: 1)
    file.maxPersistent = ["A": 1, "B": 2]
    var flags = Thresholds()
    flags.maxPersistent = ["B": 5]
    flags.maxCycles = 0
    let merged = file.overridden(by: flags)
    #expect(merged.maxGrowthPerGeneration?.bytes == 1)
    #expect(merged.maxPersistent == ["A": 1, "B": 5])
    #expect(merged.maxCycles == 0)
  }

  @Test("a max-persistent type also covers the categories that add parentheses to its name")
  func persistentLimitCoversAFamily() throws {
    var report = Report.crashed(
      scenario: "sample", variant: "starter", iterations: 1, instruments: [.allocations], error: "",
      wallTimeMilliseconds: 1, crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: []))
    let counts = [
      ("closure context (captures: App.Screen)", 3, 1), ("closure context (captures: Swift.Int)", 2, 5),
      ("closure contexts", 7, 0), ("App.Screen", 1, 0),
    ]
    report.allocations = AllocationsReport(
      mode: "countsOnly", durationMilliseconds: 1,
      totals: .init(
        totalAllocations: 19, totalBytes: 608, persistentCount: 13, persistentBytes: 416, transientCount: 6,
        transientBytes: 192, peakLiveBytes: 608, liveBytesAtEnd: 416),
      categories: counts.map { name, persistent, transient in
        .init(
          name: name, kind: "closureContext", isApp: false, persistentCount: persistent, transientCount: transient,
          totalCount: persistent + transient, persistentBytes: 32 * persistent,
          totalBytes: 32 * (persistent + transient))
      },
      generations: [], timeline: [], lost: .init(blocks: 0, stacks: 0, freedCategories: 0, timelinePoints: 0),
      overhead: .init(blockTableBytes: 0, stackTableBytes: 0, bytesPerLiveBlock: 0))
    var thresholds = Thresholds()
    thresholds.maxPersistent = ["closure context": 4, "App.Screen": 1, "App": 0, "Screen": 0, "App.Scren": 0]
    let checks = ThresholdCheck.evaluate(thresholds, on: report)
    let closures = try #require(checks.first { $0.name == "max-persistent closure context" })
    // 3 + 2: "closure contexts" is another name, not one of the family.
    #expect(closures.actual == 5)
    #expect(!closures.passed)
    #expect(
      closures.detail
        == "5 persistent, 6 transient; closure context (captures: App.Screen) 3, closure context (captures: Swift.Int) 2; record with the leaks instrument to see what keeps them alive"
    )
    #expect(checks.first { $0.name == "max-persistent App.Screen" }?.actual == 1)
    // A module name is not a family of its types: it matches nothing, which fails.
    let module = try #require(checks.first { $0.name == "max-persistent App" })
    #expect(module.actual == nil && !module.passed)
    // Without its module, a type matches the module-qualified name.
    let unqualified = try #require(checks.first { $0.name == "max-persistent Screen" })
    #expect(unqualified.actual == 1 && !unqualified.passed)
    // A misspelt type fails, and says what it may have meant.
    let misspelt = try #require(checks.first { $0.name == "max-persistent App.Scren" })
    #expect(!misspelt.passed && misspelt.actual == nil)
    #expect(misspelt.detail == "matches no type the run allocated; did you mean App.Screen?")
  }

  @Test("a recording that lost data fails the gate, whatever the limits")
  func lossesFail() throws {
    var report = Report.crashed(
      scenario: "sample", variant: "starter", iterations: 1, instruments: [.allocations], error: "",
      wallTimeMilliseconds: 1, crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: []))
    report.allocations = AllocationsReport(
      mode: "countsOnly", durationMilliseconds: 1,
      totals: .init(
        totalAllocations: 1, totalBytes: 32, persistentCount: 0, persistentBytes: 0, transientCount: 1,
        transientBytes: 32, peakLiveBytes: 32, liveBytesAtEnd: 0),
      categories: [], generations: [], timeline: [],
      lost: .init(blocks: 0, stacks: 0, freedCategories: 3_750_000, timelinePoints: 0),
      overhead: .init(blockTableBytes: 0, stackTableBytes: 0, bytesPerLiveBlock: 0))
    let checks = ThresholdCheck.evaluate(Thresholds(), on: report)
    let lost = try #require(checks.first { $0.name == "lost-allocation-records" })
    #expect(!lost.passed && lost.actual == 3_750_000)
    report.allocations?.lost.freedCategories = 0
    let clean = ThresholdCheck.evaluate(Thresholds(), on: report)
    #expect(clean.map(\.name) == ["lost-allocation-records"] && clean.allSatisfy { $0.passed })
  }

  /// A leak report as the instrument writes it, with what the scan could not judge.
  static func leaks(unscannedThreads: Int = 0, notAvoided: Int = 0, cycles: String = "[]") throws -> LeaksReport {
    let json = """
      {"leakedCount":4,"leakedBytes":128,"rootLeaks":[],"indirectLeakCount":0,"indirectLeakBytes":0,
      "indirectLeaks":[],"cycles":\(cycles),"unscannedThreads":\(unscannedThreads),"threadsScanned":3,
      "scanMilliseconds":1,"analysisMilliseconds":1,"blocksScanned":10,"edgeCount":4,"suppressedCount":0,"suppressedBytes":0,
      "danglingAddresses":{"reserved":10,"blocksHeldAside":0,"bytesHeldAside":0,"notAvoided":\(notAvoided)}}
      """
    return try JSONDecoder().decode(LeaksReport.self, from: Data(json.utf8))
  }

  @Test("a leak scan that could not read a thread or keep an address off new blocks fails the gate")
  func incompleteLeakScanFails() throws {
    var report = Report.crashed(
      scenario: "sample", variant: "starter", iterations: 1, instruments: [.leaks], error: "",
      wallTimeMilliseconds: 1, crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: []))
    report.leaks = try Self.leaks()
    let clean = try #require(
      ThresholdCheck.evaluate(Thresholds(), on: report).first { $0.name == "leak-scan-incomplete" })
    #expect(clean.passed && clean.actual == 0)
    report.leaks = try Self.leaks(unscannedThreads: 1, notAvoided: 2)
    let failed = try #require(
      ThresholdCheck.evaluate(Thresholds(), on: report).first { $0.name == "leak-scan-incomplete" })
    #expect(!failed.passed && failed.actual == 3)
    #expect(failed.detail?.contains("1 threads could not be read") == true, "\(failed.detail ?? "")")
    #expect(failed.detail?.contains("2 new blocks got an address a dangling pointer names") == true)
    // And the text says so where people read.
    #expect(report.leaks!.textSummary().contains("warning: 1 threads did not stop"))
    #expect(
      report.leaks!.textSummary().contains("warning: 2 new blocks got an address an older dangling pointer names"))
  }

  /// A failing cycle gate names every member of each cycle where the program made it.
  @Test("max-cycles names the members and their allocation sites")
  func cycleSites() throws {
    let frame = """
      {"symbol":"MyApp.Screen.init()","module":"MyApp","file":"/src/Screen.swift","line":12,"isApp":true}
      """
    let cycles = """
      [{"nodes":[{"type":"MyApp.Screen","bytes":48,"allocationStack":[\(frame)]},
      {"type":"closure context (captures: MyApp.Screen)","bytes":32,"allocationStack":[]}],
      "edges":[],"neighbors":[],"neighborEdges":[],"instances":3}]
      """
    var report = Report.crashed(
      scenario: "sample", variant: "starter", iterations: 1, instruments: [.leaks], error: "",
      wallTimeMilliseconds: 1, crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: []))
    report.leaks = try Self.leaks(cycles: cycles)
    let thresholds = try Thresholds.parse("max-cycles: 0\nmax-leaked-bytes: 0", path: "t.yaml")
    let checks = ThresholdCheck.evaluate(thresholds, on: report)
    let cycle = try #require(checks.first { $0.name == "max-cycles" })
    #expect(!cycle.passed && cycle.actual == 3)
    #expect(
      cycle.detail
        == "MyApp.Screen (allocated at MyApp.Screen.init() (Screen.swift:12)) -> closure context (captures: MyApp.Screen) x3",
      "\(cycle.detail ?? "")")
    let bytes = try #require(checks.first { $0.name == "max-leaked-bytes" })
    #expect(bytes.detail?.contains("3 MyApp.Screen allocated at MyApp.Screen.init() (Screen.swift:12)") == true)
  }

  @Test("lost samples above 1 % fail the gate, and the text says LOST")
  func lostSamplesFail() throws {
    func profile(lost: Int) throws -> TimeProfileReport {
      let json = """
        {"clock":"cpu","sampleRateHz":1000,"sampleCount":800,"lostSamples":\(lost),"signalsReceived":800,
        "totalWeightMilliseconds":800,"durationMilliseconds":1000,"handlerMedianMicroseconds":1,
        "handlerP90Microseconds":2,"medianStackDepth":10,"symbolizationMilliseconds":1,"uniqueAddresses":1,
        "threads":[],"topFunctions":[],
        "profile":{"frames":[],"threads":[],"samples":[],"sampleIntervalMilliseconds":1}}
        """
      return try JSONDecoder().decode(TimeProfileReport.self, from: Data(json.utf8))
    }
    var report = Report.crashed(
      scenario: "sample", variant: "starter", iterations: 1, instruments: [.time], error: "",
      wallTimeMilliseconds: 1, crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: []))
    report.timeProfile = try profile(lost: 8)  // 8 of 808: under 1 %
    #expect(
      ThresholdCheck.evaluate(Thresholds(), on: report).first { $0.name == "lost-samples-percent" }?.passed == true)
    report.timeProfile = try profile(lost: 200)  // 200 of 1000
    let failed = try #require(
      ThresholdCheck.evaluate(Thresholds(), on: report).first { $0.name == "lost-samples-percent" })
    #expect(!failed.passed && failed.actual == 20)
    #expect(failed.detail == "200 of 1000 samples lost")
  }

  @Test("min-coverage: a percentage, checked against the Time Profiler's coverage, unmeasured fails")
  func minCoverage() throws {
    let thresholds = try Thresholds.parse("min-coverage: 95%", path: "t.yaml")
    #expect(thresholds.minCoveragePercent == 95)
    #expect(thresholds.requiredInstruments.contains(.time))
    #expect(throws: ThresholdsFileError.self) { try Thresholds.parse("min-coverage: 120", path: "t.yaml") }
    #expect(Limit.percent(parsing: "97.5 %") == 97.5)
    var report = Report.crashed(
      scenario: "sample", variant: "starter", iterations: 1, instruments: [.time], error: "",
      wallTimeMilliseconds: 1, crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: []))
    let unmeasured = try #require(ThresholdCheck.evaluate(thresholds, on: report).first { $0.name == "min-coverage" })
    #expect(!unmeasured.passed && unmeasured.actual == nil)
    func profile(coverage: Double) throws -> TimeProfileReport {
      let json = """
        {"clock":"cpu","sampleRateHz":1000,"sampleCount":800,"lostSamples":0,"signalsReceived":800,
        "totalWeightMilliseconds":800,"durationMilliseconds":1000,"handlerMedianMicroseconds":1,
        "handlerP90Microseconds":2,"medianStackDepth":10,"symbolizationMilliseconds":1,"uniqueAddresses":1,
        "threads":[],"topFunctions":[],
        "profile":{"frames":[],"threads":[],"samples":[],"sampleIntervalMilliseconds":1},
        "cpuMilliseconds":1000,"coveragePercent":\(coverage),
        "unsampled":[{"name":"worker","threadID":7,"cpuMilliseconds":200,"reason":"blocks SIGPROF"}]}
        """
      return try JSONDecoder().decode(TimeProfileReport.self, from: Data(json.utf8))
    }
    report.timeProfile = try profile(coverage: 80)
    let failed = try #require(ThresholdCheck.evaluate(thresholds, on: report).first { $0.name == "min-coverage" })
    #expect(!failed.passed && failed.actual == 80)
    #expect(failed.detail?.contains("worker [7]: blocks SIGPROF") == true)
    report.timeProfile = try profile(coverage: 99)
    #expect(ThresholdCheck.evaluate(thresholds, on: report).first { $0.name == "min-coverage" }?.passed == true)
  }
}
