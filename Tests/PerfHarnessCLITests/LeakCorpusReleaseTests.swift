import Foundation
import LeakCorpusCases
import PerfHarness
import Testing

/// The leaks corpus, one process per case: `perfharness-leak-corpus` runs every case as a
/// scenario, in an optimized build (built by `make test` with
/// `swift build -c release --product perfharness-leak-corpus`) and in the debug build; each
/// report must name exactly the leaks the case makes.
@Suite("Leaks corpus, release and debug builds")
struct LeakCorpusReleaseTests {
  /// What a case leaks: cycles (sorted short type names, instances), root and indirect
  /// leaks by short type name, and the total count of leaked blocks.
  struct Verdict: Equatable, CustomStringConvertible {
    var cycles: [[String]: Int] = [:]
    var roots: [String: Int] = [:]
    var indirect: [String: Int] = [:]
    var leakedCount = 0

    var description: String { "cycles \(cycles) roots \(roots) indirect \(indirect) leaked \(leakedCount)" }
  }

  static let expected: [String: Verdict] = [
    "two-object-cycle": Verdict(cycles: [["LeakTwoA", "LeakTwoB"]: 1], leakedCount: 2),
    "closure-with-other-capture": Verdict(
      cycles: [["LeakClosureOwner", "closure context"]: 1], indirect: ["LeakClosureOther": 1], leakedCount: 3),
    "self-only-closure": Verdict(cycles: [["LeakSelfOnlyOwner"]: 1], leakedCount: 1),
    "delegate-cycle": Verdict(cycles: [["LeakDelegatingTask", "LeakTaskController"]: 1], leakedCount: 2),
    "delegate-and-closure-cycle": Verdict(cycles: [["LeakFeedController", "LeakFeedLoader"]: 1], leakedCount: 2),
    "weak-and-unowned": Verdict(),
    // The weak parent's side table (32 bytes, owned by the object) leaks with it.
    "weak-and-unowned-back-references": Verdict(
      roots: ["LeakWeakParent": 1, "LeakUnownedParent": 1],
      indirect: ["LeakWeakChild": 1, "LeakUnownedChild": 1, "Malloc 32 Bytes": 1], leakedCount: 5),
    "root-leak": Verdict(roots: ["LeakOrphan": 1], leakedCount: 1),
    "global-cache": Verdict(),
    "global-cycle": Verdict(),
    "cycle-behind-stale-words": Verdict(cycles: [["LeakStaleA", "LeakStaleB"]: 1], leakedCount: 2),
    "cycles-checked-at-marks": Verdict(cycles: [["LeakCheckedA", "LeakCheckedB"]: 3], leakedCount: 6),
    "cycles-behind-dangling-pointers": Verdict(cycles: [["LeakDanglingA", "LeakDanglingB"]: 3], leakedCount: 6),
    "many-cycles": Verdict(cycles: [["LeakManyA", "LeakManyB"]: 25], leakedCount: 50),
    // Long labels (heap strings the scenario builds) are the harness's to keep, never leaks.
    "cycle-per-iteration": Verdict(cycles: [["LeakIterationOwner", "closure context"]: 10], leakedCount: 20),
  ]

  static func short(_ type: String) -> String { LeakShapes.shortTypeName(type) }

  /// `.build/<configuration>/perfharness-leak-corpus`, next to the debug products of this
  /// test bundle.
  static func corpusBinary(_ configuration: String = "release") throws -> URL {
    var folder = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    while !folder.path.isEmpty && folder.path != "/" {
      folder = folder.deletingLastPathComponent()
      if folder.lastPathComponent == ".build" {
        let candidate = folder.appendingPathComponent("\(configuration)/perfharness-leak-corpus")
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        break
      }
    }
    throw BuiltBinary.MissingBinary(
      name:
        "\(configuration) perfharness-leak-corpus (swift build -c \(configuration) --product perfharness-leak-corpus)")
  }

  @Test("every case reports exactly its leaks", arguments: ["release", "debug"])
  func verdicts(configuration: String) throws {
    let corpus = BuiltBinary(url: try Self.corpusBinary(configuration))
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    // The shapes are the runner's (shapesInEveryRun).
    let result = try corpus.run(
      ["scenario"] + Self.expected.keys.sorted() + [
        "--instruments", "leaks", "--format", "json", "--output", directory.path,
      ])
    #expect(result.status == 0, "\(result.standardError)")
    var seen: Set<String> = []
    for line in result.standardOutput.split(separator: "\n") {
      let report = try JSONDecoder().decode(Report.self, from: Data(line.utf8))
      let leaks = try #require(report.leaks, "\(report.scenario.name): no leaks section (\(report.error ?? ""))")
      #expect(report.environment.buildConfiguration == configuration)
      var verdict = Verdict(leakedCount: leaks.leakedCount)
      for cycle in leaks.cycles {
        verdict.cycles[cycle.nodes.map { Self.short($0.type) }.sorted(), default: 0] += cycle.instances
      }
      for leak in leaks.rootLeaks { verdict.roots[Self.short(leak.type), default: 0] += leak.count }
      for leak in leaks.indirectLeaks { verdict.indirect[Self.short(leak.type), default: 0] += leak.count }
      #expect(verdict == Self.expected[report.scenario.name], "\(report.scenario.name): \(verdict)")
      if report.scenario.name == "delegate-and-closure-cycle" {
        // Both references the loader holds are named: breaking one leaves the cycle.
        #expect(leaks.cycles.first.map { Set($0.edges.compactMap(\.name)) } == ["loader", "delegate", "onRefresh"])
      }
      seen.insert(report.scenario.name)
    }
    #expect(seen == Set(Self.expected.keys))
  }

  /// A one-element `[Scenario]` buffer older than the recording had a stale word in its
  /// chunk's slack, past its element, naming where a cycle was later allocated: the scan
  /// read up to a stride bounded by the chunk size and missed that cycle in most runs with
  /// the Time Profiler on. Every run must find every instance.
  @Test("a cycle per iteration is found in every run, with every instrument", arguments: ["release", "debug"])
  func everyInstanceInEveryRun(configuration: String) throws {
    let corpus = BuiltBinary(url: try Self.corpusBinary(configuration))
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    var found: [Int] = []
    for _ in 0..<6 {
      let result = try corpus.run([
        "scenario", "cycle-per-iteration", "--instruments", "time,allocations,leaks", "--format", "json",
        "--output", directory.path,
      ])
      #expect(result.status == 0, "\(result.standardError)")
      let report = try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
      let leaks = try #require(report.leaks)
      found.append(leaks.cycles.reduce(0) { $0 + $1.instances })
      #expect(leaks.rootLeaks.isEmpty, "\(leaks.rootLeaks.map { "\($0.count) \($0.type)" })")
      #expect(leaks.leakedCount == 20)
    }
    #expect(found == Array(repeating: 10, count: 6))
  }

  /// The shapes of cycles programs outside this project leak (closures capturing self, and
  /// self and a value, a ring of closures, linked nodes, rings, delegates, arrays of
  /// closures, a parent whose closure's self-loop overlaps its children's ring, a handler
  /// wrapped by a generic extension, made on the main thread, Dispatch workers and in task
  /// groups), each in its own process, in both builds, with and without the Time Profiler:
  /// every instance of every ring and nothing else in every run.
  /// `make leak-corpus` runs the same for as many runs as asked (RUNS, default 50).
  @Test("every shape of leaked cycle, in every run, both builds, with and without the Time Profiler")
  func shapesInEveryRun() throws {
    let runner = try BuiltBinary("perfharness-leak-corpus-runner")
    for configuration in ["release", "debug"] {
      let result = try runner.run(["--runs", "2", "--configurations", configuration])
      #expect(result.status == 0, "\(result.standardOutput)\n\(result.standardError)")
      #expect(result.standardOutput.contains("every run exact"))
      #expect(
        result.standardOutput.split(separator: "\n").filter { $0.hasPrefix("shape-") }.count
          == LeakShapes.expectations.count * 2)
    }
  }

  /// Xcode's memory graph answers "why is this still alive?"; so do a failing
  /// max-persistent check and `perfharness report --retainers`, from the stored report.
  @Test("why is it still alive: the path from the global, in a failing check and in report --retainers")
  func retainers() throws {
    let corpus = BuiltBinary(url: try Self.corpusBinary())
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try corpus.run([
      "scenario", "global-cache", "--instruments", "allocations,leaks", "--check", "--max-persistent",
      "LeakCachedItem=10", "--output", directory.path,
    ])
    #expect(result.status == 2, "\(result.standardOutput)")
    let failing = result.standardOutput.split(separator: "\n").first { $0.contains("max-persistent LeakCachedItem") }
    let detail = String(failing ?? "")
    #expect(detail.contains("100 persistent") && detail.contains("alive via global"), "\(result.standardOutput)")
    #expect(detail.contains("LeakGlobalCache.items") && detail.contains("(element) LeakCorpusCases.LeakCachedItem"))
    let file = directory.appendingPathComponent("global-cache/starter/report.json").path
    let report = try corpus.run(["report", file, "--retainers", "LeakCachedItem"])
    #expect(report.status == 0, "\(report.standardError)")
    #expect(
      report.standardOutput.contains("LeakCorpusCases.LeakCachedItem: 100 alive at the end"), "\(report.standardOutput)"
    )
    #expect(report.standardOutput.contains("100 of 100: global "), "\(report.standardOutput)")
    let none = try corpus.run(["report", file, "--retainers", "NoSuchType"])
    #expect(none.status == 64 && none.standardError.contains("has no type named NoSuchType"))
    // Without the leaks instrument there is no graph to read paths from: a usage error.
    let withoutLeaks = try corpus.run([
      "scenario", "global-cache", "--instruments", "allocations", "--output", directory.path,
    ])
    #expect(withoutLeaks.status == 0)
    let refused = try corpus.run(["report", file, "--retainers", "LeakCachedItem"])
    #expect(
      refused.status == 64 && refused.standardError.contains("needs the leaks instrument"), "\(refused.standardError)")
  }

  @Test(
    "a leak check at each mark sees the cycles made so far, and records none of its own allocations",
    arguments: ["allocations,leaks", "time,allocations,leaks"])
  func checksAtMarks(instruments: String) throws {
    let corpus = BuiltBinary(url: try Self.corpusBinary())
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    func run(_ extra: [String]) throws -> Report {
      let result = try corpus.run(
        [
          "scenario", "cycles-checked-at-marks", "--instruments", instruments, "--format", "json", "--output",
          directory.path,
        ]
          + extra)
      #expect(result.status == 0, "\(result.standardError)")
      return try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
    }
    // A check may lag (docs/heap-scan.md: the scenario's own thread is a root while it
    // waits, and a stale slot there can hold the newest cycle until the end; once in a
    // loaded suite's run, the last check saw 2 of 3): a lagging run is run again, twice at
    // most. A check that sees more than was leaked is never retried.
    var checked = try run(["--leak-check-at-marks"])
    for _ in 0..<2 {
      let seen = (checked.leaks?.checks ?? []).map { $0.cycles.reduce(0) { $0 + $1.instances } }
      guard seen.count == 4, zip(seen, [0, 1, 2, 3]).allSatisfy({ $0 <= $1 }), seen != [0, 1, 2, 3] else { break }
      checked = try run(["--leak-check-at-marks"])
    }
    let checks = try #require(checked.leaks?.checks)
    #expect(
      checks.map(\.label) == [
        "before anything leaked", "after leaking cycle number 1", "after leaking cycle number 2",
        "after leaking cycle number 3",
      ])
    #expect(checks.map(\.generation) == [0, 1, 2, 3])
    #expect(checks.map { $0.cycles.reduce(0) { $0 + $1.instances } } == [0, 1, 2, 3])
    #expect(checks.map(\.leakedCount) == [0, 2, 4, 6])
    // While the scenario runs, the child's crash-reporter thread (and the Time Profiler's
    // discovery thread) block every signal, so they do not park: their stacks are read from
    // the system call they wait in.
    // One of them may be running rather than waiting when the check looks (a thread
    // whose stack cannot be read at all counts as unscanned).
    #expect(checks.allSatisfy { $0.rootLeaks.isEmpty }, "\(checks.map(\.rootLeaks))")
    #expect(
      checks.allSatisfy { (1...2).contains($0.blockedThreads + $0.unscannedThreads) },
      "blocked \(checks.map(\.blockedThreads)), unscanned \(checks.map(\.unscannedThreads))")
    #expect(
      checks.dropFirst().allSatisfy {
        $0.cycles.map { $0.types.map(Self.short).sorted() } == [["LeakCheckedA", "LeakCheckedB"]]
      })
    // Neither the checks nor setting up and collecting the instruments is sampled: that is
    // the harness's time, not the scenario's.
    if let profile = checked.timeProfile?.profile {
      let harnessWork = ["HeapSnapshot.take", "AllocationRecorder.start", "AllocationRecorder.stop", "LeakAnalysis."]
      let sampled = profile.samples.flatMap { sample in
        sample.stack.map { profile.frames[$0].name }.filter { name in harnessWork.contains { name.contains($0) } }
      }
      #expect(sampled.isEmpty, "\(Set(sampled))")
    }
    // The final verdict is the same with or without the checks, and so are the counts:
    // what a check allocates is the harness's, not the scenario's.
    let plain = try run([])
    #expect(plain.leaks?.checks?.map(\.label) == ["before anything leaked"])
    #expect(checked.leaks?.leakedCount == 6 && plain.leaks?.leakedCount == 6)
    let checkedAllocations = try #require(checked.allocations)
    let plainAllocations = try #require(plain.allocations)
    #expect(checkedAllocations.totals.totalAllocations == plainAllocations.totals.totalAllocations)
    // (A check may grow the Swift runtime's metadata caches, which frees their older tables:
    // the persistent count of those blocks can differ.)
    #expect(checkedAllocations.categories.map(\.name).sorted() == plainAllocations.categories.map(\.name).sorted())
  }
}

extension BuiltBinary {
  init(url: URL) { self.url = url }
}
