import Foundation
import PerfBenchSupport
import PerfHarness
import PerfReports
import Testing

/// report.html in a real headless Chromium (Debian's `chromium`, installed by `make setup`):
/// the page opens without errors, every Call Tree option changes the tree exactly as
/// `CallTree` does in Swift, and a screenshot shows it.
@Suite("HTML report in a browser")
struct HTMLBrowserTests {
  let perfharness = try! BuiltBinary("perfharness")

  /// A one-iteration closure-retain-cycles report with allocations, for `report --html`.
  private func recordAllocations(into directory: URL) throws -> URL {
    let run = try perfharness.run([
      "scenario", "closure-retain-cycles", "--iterations", "1", "--instruments", "allocations", "--output",
      directory.path,
    ])
    #expect(run.status == 0, "\(run.standardError)")
    return directory.appendingPathComponent("closure-retain-cycles/starter/report.json")
  }
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  @Test(
    "report.html opens without errors, its call tree options agree with CallTree, and a screenshot shows it",
    arguments: ["filtered-thumbnail-scrolling", "search-drill-downs", "closure-retain-cycles"])
  func scenarioPage(scenario: String) throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "scenario", scenario, "--iterations", "1", "--instruments", "time,allocations,leaks", "--leak-check-at-marks",
      "--output", directory.path,
    ])
    #expect(result.status == 0, "\(result.standardError)")
    let folder = directory.appendingPathComponent("\(scenario)/starter")
    let page = folder.appendingPathComponent("report.html")
    let report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: folder.appendingPathComponent("report.json")))

    let selfTest = try Chromium.selfTest(page, workingIn: directory)
    #expect(selfTest.problems.isEmpty, "\(selfTest.problems)")
    #expect(Set(selfTest.sections).isSuperset(of: ["summary", "time-profile", "allocations", "leaks"]))
    #expect(selfTest.renderedMs > 0)
    #expect((HTMLReport.browserTiming(fromDOM: selfTest.dom)?.treeMilliseconds ?? 0) > 0)
    #expect(selfTest.collapseChangesRows == true)
    #expect(selfTest.flameZoomed == true)
    #expect((selfTest.search?.rows ?? 0) > 0)
    #expect((selfTest.allocations?.rows ?? 0) > 0)
    // The allocation flame graph weighs what the report's stacks hold, in bytes and in
    // blocks; Hide System Libraries (on by default) shows the program's frames only.
    let stacks = report.allocations?.persistentStacks ?? []
    let flame = try #require(selfTest.allocationFlame, "no allocation flame graph")
    #expect(flame.bytes.rects > 0 && flame.bytes.leaves > 0)
    #expect(flame.bytes.total == Double(stacks.reduce(0) { $0 + $1.bytes }))
    #expect(flame.count.total == Double(stacks.reduce(0) { $0 + $1.count }))
    #expect(flame.bytes.systemFrames == 0 && flame.bytes.appFrames > 0)
    #expect(flame.allFrames.systemFrames > 0, "system frames show with Hide System Libraries off")
    #expect(flame.allFrames.total == flame.bytes.total)
    #expect(flame.zoomed == true)
    // Switched to everything allocated while recording: the report's totals by stack.
    let totals = try #require(report.allocations?.totalStacks)
    #expect(flame.totalBytes?.total == Double(totals.reduce(0) { $0 + $1.bytes }))
    #expect(flame.totalCount?.total == Double(totals.reduce(0) { $0 + $1.count }))
    #expect((flame.totalBytes?.total ?? 0) >= flame.bytes.total)
    // Scenarios that mark generations get a leak check at each mark, drawn as a table.
    #expect(selfTest.dom.contains("<th>Cycle types</th>") == !(report.leaks?.checks ?? []).isEmpty)
    #expect((report.leaks?.checks?.count ?? 0) == report.marks.count)
    // Every type alive at the end has its shortest paths from a root, as the report has them.
    let retainers = report.leaks?.retainers ?? []
    #expect(selfTest.dom.contains("Why is it still alive?") == !retainers.isEmpty)
    for entry in retainers.prefix(100) {
      #expect(selfTest.dom.contains(htmlEscaped(entry.type)), "\(entry.type)")
    }

    // The page leads with the findings, each instrument's, and the status says nothing was checked.
    #expect(selfTest.sections.first == "findings")
    for kind in ["time", "allocations", "leaks", "checks"] {
      #expect(selfTest.dom.contains(#"data-kind="\#(kind)""#), "finding \(kind)")
    }
    #expect(selfTest.dom.contains(#"class="badge no-checks""#))
    #expect(!selfTest.dom.contains(#"class="badge passed""#))
    if let cycle = report.leaks?.cycles.first {
      #expect(selfTest.dom.contains("cycle × \(cycle.instances)"))
    }

    // The default view: Instruments' tutorial options, the scenario's body at the top of each
    // thread, the heaviest path open.
    let view = try #require(selfTest.defaultView)
    #expect(Set(view.options) == ["separateByThread", "hideSystemLibraries", "startAtScenario"])
    let mainThread = try #require(view.roots.first)
    #expect(mainThread.kind == "thread")
    let entry = try #require(mainThread.children.first)
    let harness = Set(Profile.harnessModules)
    // The scenario's body is declared in the scenario library, under the harness's runner.
    #expect(entry.module == "Scenarios", "\(entry.name) [\(entry.module)]")
    for row in view.roots.flatMap(\.children) {
      #expect(!harness.contains(row.module) && row.module != "perfharness", "\(row.name) [\(row.module)]")
    }
    // The flame graph's row under the threads: the body, and nothing of the process's entry.
    #expect(view.flameSecondRow.contains { $0.hasPrefix(entry.name + " [") }, "\(view.flameSecondRow)")
    for frame in view.flameSecondRow {
      #expect(
        !(harness.map { "[\($0)]" } + ["[perfharness]", "_start"]).contains { frame.contains($0) }, "\(frame)")
    }
    #expect(view.rowCount >= 6, "the heaviest path is opened")
    #expect(view.firstRows.count >= 5 && view.firstRows.prefix(5).allSatisfy { $0.hasPrefix("▾") }, "\(view.firstRows)")

    let profile = try #require(report.timeProfile?.profile)
    let none = try #require(selfTest.states["none"])
    // With every option off the page is the recorded stacks from the process's entry.
    #expect(none.firstRows.first != view.firstRows.first)
    #expect(none.rowCount > 1 && none.flameRects > 1)
    for (name, state) in selfTest.states {
      let options = try CallTreeOptions(
        parsing: name.split(separator: "+").map { String($0).kebabCased }.joined(separator: ","))
      expectAgreement(state, CallTree(profile: profile, options: options), name)
    }
    // Each option alone changes what is drawn whenever it changes the tree: Flatten Recursion
    // only does if the profile recursed.
    let plain = CallTree(profile: profile, options: .init())
    for option in CallTreeOptions.optionNames {
      let state = try #require(selfTest.states[option.camelCased], "\(option)")
      let tree = CallTree(profile: profile, options: try CallTreeOptions(parsing: option))
      let swiftChanged = summary(of: tree) != summary(of: plain)
      let pageChanged =
        state.firstRows != none.firstRows || state.rowCount != none.rowCount
        || state.flameRects != none.flameRects
      #expect(pageChanged || !swiftChanged, "\(option) did not change the page's tree")
      // The others always change the drawn roots or rows (a thread row on top, leaves first, no
      // libc frames, one root per function).
      if option != "flatten-recursion" {
        #expect(
          state.firstRows != none.firstRows || state.roots.map(\.name) != none.roots.map(\.name), "\(option)")
      }
    }
    if let leaks = report.leaks { #expect(selfTest.cycles == leaks.cycles.count) }

    let screenshot = directory.appendingPathComponent("report.png")
    try Chromium.screenshot(page, to: screenshot, width: 1400, height: 1000, workingIn: directory)
    let png = try Data(contentsOf: screenshot)
    #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]))
    #expect(png.count > 16 && png[16..<24].elementsEqual([0, 0, 0x05, 0x78, 0, 0, 0x03, 0xE8]), "1400×1000")
    // A blank page compresses to a few kilobytes; text, tables and the tree do not.
    #expect(png.count > 40_000, "\(png.count) bytes")
  }

  @Test("a run writes index.html linking each scenario's report, with its status and findings, and prints it last")
  func runIndex() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let run = try perfharness.run([
      "scenario", "closure-retain-cycles", "search-drill-downs", "--iterations", "1", "--instruments",
      "allocations,leaks",
      "--output", directory.path,
    ])
    #expect(run.status == 0, "\(run.standardError)")
    let index = directory.appendingPathComponent("index.html")
    #expect(run.standardOutput.split(separator: "\n").last == "index: \(index.path)"[...])
    let dom = try Chromium.run(["--dump-dom", index.absoluteString], workingIn: directory)
    for scenario in ["closure-retain-cycles", "search-drill-downs"] {
      #expect(dom.contains(#"<a href="\#(scenario)/starter/report.html">\#(scenario)</a>"#), "\(scenario)")
      #expect(
        FileManager.default.fileExists(
          atPath: directory.appendingPathComponent("\(scenario)/starter/report.html").path))
    }
    #expect(dom.components(separatedBy: #"class="badge no-checks""#).count == 3)
    let cycles = try JSONDecoder().decode(
      Report.self,
      from: Data(contentsOf: directory.appendingPathComponent("closure-retain-cycles/starter/report.json")))
    let leaked = try #require(cycles.leaks?.leakedCount)
    #expect(dom.contains("\(leaked) leaked blocks"))
    // Each row leads with what its report page leads with, not only the problems.
    #expect(!dom.contains("nothing to act on"))
    for scenario in ["closure-retain-cycles", "search-drill-downs"] {
      let report = try JSONDecoder().decode(
        Report.self, from: Data(contentsOf: directory.appendingPathComponent("\(scenario)/starter/report.json")))
      let row = try #require(
        dom.components(separatedBy: "<tr data-scenario=\"\(scenario)\"").dropFirst().first?
          .components(separatedBy: "</tr>").first)
      for finding in Findings.of(report) {
        #expect(row.contains(htmlEscaped(finding.summary)), "\(scenario): \(finding.summary)")
      }
    }
  }

  @Test("report --html draws a baseline comparison from the comparison key, nulls included")
  func comparisonSection() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let json = try recordAllocations(into: directory)
    var object = try #require(JSONSerialization.jsonObject(with: Data(contentsOf: json)) as? [String: Any])
    // The shape BaselineComparison encodes (a model that reads the key must accept it), with
    // the nulls it allows.
    object["comparison"] = [
      "baseline": "Reports/baseline/report.json", "baselineScenario": "closure-retain-cycles [fixed]",
      "tolerancePercent": 10, "minimumBytes": 4096, "minimumCount": 32, "passed": false,
      "rows": [
        [
          "metric": "allocations.totals.persistentBytes", "unit": "bytes", "baseline": 1000.0, "current": 2000.0,
          "changePercent": 100.0, "limitPercent": 10, "passed": false, "detail": "grew by 1000 bytes",
        ],
        [
          "metric": "leaks.leakedBytes", "unit": "bytes", "baseline": NSNull(), "current": 10,
          "changePercent": NSNull(), "limitPercent": NSNull(), "passed": true,
        ],
      ],
      "functionChanges": [
        ["symbol": "App.filter(_:)", "module": "App", "baselineSelfPercent": 30.0, "currentSelfPercent": 70.0]
      ],
      "allocationChanges": [
        [
          "category": "App.Entry", "site": "App.Cache.store(_:) (Cache.swift:12)", "baselineBytes": 1000,
          "currentBytes": 5096, "baselineCount": 1, "currentCount": 5,
        ]
      ],
    ]
    let withComparison = directory.appendingPathComponent("with-comparison.json")
    try JSONSerialization.data(withJSONObject: object).write(to: withComparison)
    let page = directory.appendingPathComponent("out.html")
    let result = try perfharness.run(["report", withComparison.path, "--html", page.path])
    #expect(result.status == 0, "\(result.standardError)")
    let selfTest = try Chromium.selfTest(page, workingIn: directory)
    #expect(selfTest.problems.isEmpty, "\(selfTest.problems)")
    #expect(selfTest.sections.contains("comparison"))
    #expect(selfTest.dom.contains("allocations.totals.persistentBytes"))
    #expect(selfTest.dom.contains("+100.0%"))
    // The unit formats the values rather than taking a column; unknown keys still show.
    #expect(selfTest.dom.contains("1.95 KiB") && !selfTest.dom.contains(">unit</th>"))
    #expect(selfTest.dom.contains("grew by 1000 bytes") && selfTest.dom.contains("closure-retain-cycles [fixed]"))
    // What moved: the functions' shares and the allocation stacks that grew, as tables.
    #expect(selfTest.dom.contains("Functions that moved most") && selfTest.dom.contains("+40.0 pts"))
    #expect(selfTest.dom.contains("App.Cache.store(_:) (Cache.swift:12)") && selfTest.dom.contains("+4.00 KiB"))
    #expect(!selfTest.dom.contains("<dt>functionChanges</dt>"), "drawn as a table, not as raw JSON")
    // The second row had no limit and no baseline figure: nothing judged it, so no green badge.
    #expect(selfTest.dom.contains(#"<span class="badge not-gated">not gated</span>"#))
    #expect(!selfTest.dom.contains(#"class="badge passed""#), "a row nothing judged wears no passed badge")
  }

  /// The tutorial's fix moves the filter off the main thread: against the starter run, the
  /// fixed run's flame graph paints each program function by how its self time moved.
  @Test("against a baseline, the flame graph is coloured by each function's change in self time")
  func differentialFlameGraph() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let base = try perfharness.run([
      "scenario", "filtered-thumbnail-scrolling", "--iterations", "1", "--instruments", "time",
      "--output", directory.appendingPathComponent("base").path,
    ])
    #expect(base.status == 0, "\(base.standardError)")
    let baseline = directory.appendingPathComponent("base/filtered-thumbnail-scrolling/starter/report.json")
    let run = try perfharness.run([
      "scenario", "filtered-thumbnail-scrolling", "--variant", "fixed", "--iterations", "1", "--instruments", "time",
      "--baseline", baseline.path, "--allow-different-setup", "--time-tolerance", "1000",
      "--output", directory.appendingPathComponent("new").path,
    ])
    let folder = directory.appendingPathComponent("new/filtered-thumbnail-scrolling/fixed")
    let report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: folder.appendingPathComponent("report.json")))
    let shares = try #require(report.comparison?.functionShares, "\(run.standardError)")
    #expect(!shares.isEmpty)
    let moved = Dictionary(
      shares.map { ("\($0.symbol) [\($0.module)]", $0.currentSelfPercent - $0.baselineSelfPercent) },
      uniquingKeysWith: { first, _ in first })
    let selfTest = try Chromium.selfTest(folder.appendingPathComponent("report.html"), workingIn: directory)
    #expect(selfTest.problems.isEmpty, "\(selfTest.problems)")
    let painted = try #require(selfTest.flameChanges)
    let judged = painted.filter { $0.change == "more" || $0.change == "less" }
    #expect(!judged.isEmpty, "no frame coloured by its change: \(painted.prefix(5))")
    for frame in judged {
      let name = String(frame.title.prefix { $0 != "—" }.dropLast())
      let change = try #require(moved[name], "\(name) has no share in the comparison")
      #expect((change > 0) == (frame.change == "more"), "\(name): \(change) points, painted \(frame.change)")
    }
  }

  /// The starter's thumbnail cache keeps growing where the fixed one does not: against the
  /// fixed run, the starter's allocation flame graph paints the frames under which more lives
  /// red, from the baselines the comparison keeps for the starter's stacks.
  @Test("against a baseline, the allocation flame graph is coloured by the change in what lives under each frame")
  func differentialAllocationFlameGraph() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let base = try perfharness.run([
      "scenario", "filtered-thumbnail-scrolling", "--variant", "fixed", "--iterations", "2", "--instruments",
      "allocations", "--output", directory.appendingPathComponent("base").path,
    ])
    #expect(base.status == 0, "\(base.standardError)")
    let baseline = directory.appendingPathComponent("base/filtered-thumbnail-scrolling/fixed/report.json")
    let run = try perfharness.run([
      "scenario", "filtered-thumbnail-scrolling", "--iterations", "2", "--instruments", "allocations",
      "--baseline", baseline.path, "--allow-different-setup", "--output", directory.appendingPathComponent("new").path,
    ])
    let folder = directory.appendingPathComponent("new/filtered-thumbnail-scrolling/starter")
    let report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: folder.appendingPathComponent("report.json")))
    let baselines = try #require(report.comparison?.allocationStackBaselines, "\(run.standardError)")
    let stacks = try #require(report.allocations?.persistentStacks)
    #expect(baselines.allSatisfy { stacks.indices.contains($0.stack) })
    let selfTest = try Chromium.selfTest(folder.appendingPathComponent("report.html"), workingIn: directory)
    #expect(selfTest.problems.isEmpty, "\(selfTest.problems)")
    let painted = try #require(selfTest.allocationFlame?.changes, "no differential allocation flame graph")
    #expect(painted.contains { $0.change == "more" }, "nothing grew: \(painted.prefix(5))")
    let liveNow = stacks.reduce(0) { $0 + $1.bytes }
    let liveThen = baselines.reduce(0) { $0 + $1.bytes }
    #expect(liveNow > liveThen, "the starter keeps more live at the end than the fixed run did on the same stacks")
    // The totals (everything allocated) are compared the same way, stack by stack.
    let totalBaselines = try #require(report.comparison?.totalStackBaselines)
    let totals = try #require(report.allocations?.totalStacks)
    #expect(!totalBaselines.isEmpty && totalBaselines.allSatisfy { totals.indices.contains($0.stack) })
    #expect((selfTest.allocationFlame?.totalChanges ?? 0) > 0, "the total views are not painted by the change")
    // The root weighs both runs whole: the totals, which the comparison table's rows read.
    let flame = try #require(selfTest.allocationFlame)
    let now = try #require(report.allocations?.totals)
    let then = try #require(JSONDecoder().decode(Report.self, from: Data(contentsOf: baseline)).allocations?.totals)
    #expect(flame.bytes.total == Double(now.persistentBytes) && flame.bytes.baseline == Double(then.persistentBytes))
    #expect(flame.count.total == Double(now.persistentCount) && flame.count.baseline == Double(then.persistentCount))
    #expect(flame.totalBytes?.total == Double(now.totalBytes) && flame.totalBytes?.baseline == Double(then.totalBytes))
    #expect(
      flame.totalCount?.total == Double(now.totalAllocations)
        && flame.totalCount?.baseline == Double(then.totalAllocations))
    let table = try #require(report.comparison?.rows.first { $0.metric == "persistent bytes" })
    #expect(table.baseline == flame.bytes.baseline && table.current == flame.bytes.total)
    try ReportSchema.validateReports(under: directory.appendingPathComponent("new"))
    // `compare --html` draws the same page from two stored reports.
    let page = directory.appendingPathComponent("compared.html")
    let compared = try perfharness.run([
      "compare", baseline.path, folder.appendingPathComponent("report.json").path, "--allow-different-setup", "--html",
      page.path,
    ])
    #expect([0, 2].contains(compared.status), "\(compared.standardError)")
    let comparedTest = try Chromium.selfTest(page, workingIn: directory)
    #expect(comparedTest.problems.isEmpty, "\(comparedTest.problems)")
    #expect(comparedTest.allocationFlame?.changes?.contains { $0.change == "more" } == true)
  }

  @Test("report --html into a folder that does not exist fails with exit 1 and names the path")
  func unwritableOutput() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let json = try recordAllocations(into: directory)
    let target = directory.appendingPathComponent("missing/folder/out.html").path
    let result = try perfharness.run(["report", json.path, "--html", target])
    #expect(result.status == 1)
    #expect(result.standardError.contains(target), "\(result.standardError)")
  }

  @Test("a crashed run's report.html shows the crash without errors")
  func crashedPage() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try fixtures.run([
      "scenario", "segfault", "--instruments", "time,allocations", "--output", directory.path,
    ])
    #expect(result.status == 3)
    let page = directory.appendingPathComponent("segfault/starter/report.html")
    let selfTest = try Chromium.selfTest(page, workingIn: directory)
    #expect(selfTest.problems.isEmpty, "\(selfTest.problems)")
    #expect(selfTest.dom.contains("SIGSEGV"))
    #expect(selfTest.dom.contains(#"class="badge crashed""#))
  }

  private func summary(of tree: CallTree) -> [String] {
    tree.roots.prefix(12).map { "\($0.name)|\($0.module)|\($0.totalWeight)" }
  }

  /// Rows in display order, with totals equal up to floating-point rounding taken as equal:
  /// weights are nanoseconds of CPU time in milliseconds, and the page and Swift add them up
  /// in different orders, so rows that tie (every harness frame under Top Functions) can
  /// come out in either order on either side.
  private static func canonical<Row>(_ rows: [Row], total: (Row) -> Double, name: (Row) -> String) -> [Row] {
    rows.sorted { a, b in
      let (ta, tb) = (total(a), total(b))
      if abs(ta - tb) > 1e-9 * max(1, abs(ta), abs(tb)) { return ta > tb }
      return name(a) < name(b)
    }
  }

  /// The page's roots (and their first children) against Swift's tree for the same options.
  private func expectAgreement(_ state: SelfTest.State, _ tree: CallTree, _ name: String) {
    func close(_ a: Double, _ b: Double) -> Bool { abs(a - b) <= 1e-6 * max(1, abs(a), abs(b)) }
    let expected = Array(Self.canonical(tree.roots, total: \.totalWeight, name: \.name).prefix(12))
    #expect(state.roots.count == expected.count, "\(name): root count")
    for (page, swift) in zip(Self.canonical(state.roots, total: \.total, name: \.name), expected) {
      #expect(page.name == swift.name && page.module == swift.module, "\(name): \(page.name) vs \(swift.name)")
      #expect(close(page.total, swift.totalWeight) && close(page.selfWeight, swift.selfWeight), "\(name): \(page.name)")
      // Samples, not merged stacks, on both sides.
      #expect(page.count == swift.sampleCount, "\(name): samples of \(page.name)")
      let children = Array(Self.canonical(swift.children, total: \.totalWeight, name: \.name).prefix(6))
      #expect(page.children.count == children.count, "\(name): children of \(page.name)")
      for (pageChild, swiftChild) in zip(Self.canonical(page.children, total: \.total, name: \.name), children) {
        #expect(
          pageChild.name == swiftChild.name && close(pageChild.total, swiftChild.totalWeight)
            && close(pageChild.selfWeight, swiftChild.selfWeight) && pageChild.count == swiftChild.sampleCount,
          "\(name): \(page.name) → \(pageChild.name)")
      }
    }
  }
}

/// What the page's `#selftest` hook writes into `#selftest-result`.
struct SelfTest: Decodable {
  struct Row: Decodable {
    var name: String
    var module: String
    var total: Double
    var selfWeight: Double
    var count: Int
    private enum CodingKeys: String, CodingKey {
      case name, module, total, count
      case selfWeight = "self"
    }
  }
  struct State: Decodable {
    var roots: [RootRow]
    var rowCount: Int
    var firstRows: [String]
    var flameRects: Int
  }
  struct RootRow: Decodable {
    var kind: String
    var name: String
    var module: String
    var total: Double
    var selfWeight: Double
    var count: Int
    var children: [Row]
    private enum CodingKeys: String, CodingKey {
      case kind, name, module, total, count, children
      case selfWeight = "self"
    }
  }
  /// The view the page opens with, before the self-test touches an option.
  struct DefaultView: Decodable {
    var options: [String]
    var roots: [RootRow]
    var rowCount: Int
    var firstRows: [String]
    /// The flame graph's second row (under the thread): each frame's tooltip.
    var flameSecondRow: [String]
  }
  struct Search: Decodable { var rows: Int }
  struct Allocations: Decodable { var rows: Int }
  struct FlameView: Decodable {
    var rects: Int
    var total: Double
    var systemFrames: Int
    var appFrames: Int
    var leaves: Int
    /// The root's weight in the baseline, against one.
    var baseline: Double?
  }
  struct AllocationFlame: Decodable {
    var bytes: FlameView
    var count: FlameView
    var allFrames: FlameView
    var totalBytes: FlameView?
    var totalCount: FlameView?
    var totalChanges: Int?
    var zoomed: Bool?
    var changes: [FlameChange]?
  }

  var problems: [String]
  var sections: [String]
  var states: [String: State]
  var renderedMs: Double
  var collapseChangesRows: Bool?
  var flameZoomed: Bool?
  var search: Search?
  var allocations: Allocations?
  var allocationFlame: AllocationFlame?
  struct FlameChange: Decodable {
    var title: String
    var change: String
  }
  var flameChanges: [FlameChange]?
  var cycles: Int?
  var defaultView: DefaultView?
  /// The whole DOM as Chromium printed it.
  var dom = ""

  private enum CodingKeys: String, CodingKey {
    case problems, sections, states, renderedMs, collapseChangesRows, flameZoomed, search, allocations, cycles
    case allocationFlame, flameChanges
    case defaultView
  }
}

/// Headless Chromium, each launch bounded by a timeout and with its own profile directory
/// (tests run in parallel, and Chromium locks its profile).
enum Chromium {
  struct Failure: Error, CustomStringConvertible {
    var description: String
  }

  static var executable: String {
    get throws {
      for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
      where FileManager.default.isExecutableFile(atPath: candidate) {
        return candidate
      }
      throw Failure(description: "no chromium found: run `make setup` (it installs Debian's chromium)")
    }
  }

  /// Opens `page#selftest` and reads what the page recorded.
  static func selfTest(_ page: URL, workingIn directory: URL) throws -> SelfTest {
    let dom = try run(["--dump-dom", page.absoluteString + "#selftest"], workingIn: directory)
    guard let start = dom.range(of: #"<pre id="selftest-result">"#),
      let end = dom.range(of: "</pre>", range: start.upperBound..<dom.endIndex)
    else {
      throw Failure(
        description:
          "\(page.path): the page wrote no self-test result (did its script fail to parse?)\n\(dom.prefix(2000))")
    }
    let text = dom[start.upperBound..<end.lowerBound]
      .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
      .replacingOccurrences(of: "&nbsp;", with: "\u{A0}").replacingOccurrences(of: "&amp;", with: "&")
    var result = try JSONDecoder().decode(SelfTest.self, from: Data(text.utf8))
    result.dom = dom
    return result
  }

  static func screenshot(_ page: URL, to file: URL, width: Int, height: Int, workingIn directory: URL) throws {
    _ = try run(
      ["--hide-scrollbars", "--window-size=\(width),\(height)", "--screenshot=\(file.path)", page.absoluteString],
      workingIn: directory)
  }

  /// Runs Chromium headless and returns its stdout; kills it after `timeout` seconds.
  static func run(_ arguments: [String], workingIn directory: URL, timeout: Double = 120) throws -> String {
    let profile = directory.appendingPathComponent("chromium-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: profile) }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: try executable)
    // Root needs --no-sandbox; no GPU in CI.
    process.arguments =
      ["--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=\(profile.path)"] + arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    let finished = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in finished.signal() }
    try process.run()
    // Read while it runs: a DOM larger than the pipe's buffer would block Chromium otherwise.
    let stdout = Output()
    let reading = DispatchGroup()
    reading.enter()
    DispatchQueue.global().async {
      stdout.data = output.fileHandleForReading.readDataToEndOfFile()
      reading.leave()
    }
    if finished.wait(timeout: .now() + timeout) == .timedOut {
      process.terminate()
      if finished.wait(timeout: .now() + 5) == .timedOut { kill(process.processIdentifier, SIGKILL) }
      throw Failure(description: "chromium did not finish within \(Int(timeout)) s: \(arguments)")
    }
    reading.wait()
    guard process.terminationStatus == 0 else {
      throw Failure(description: "chromium exited with \(process.terminationStatus): \(arguments)")
    }
    return String(decoding: stdout.data, as: UTF8.self)
  }

  private final class Output: @unchecked Sendable {
    var data = Data()
  }
}

extension String {
  /// `hide-system-libraries` → `hideSystemLibraries`: the page names states by property.
  fileprivate var camelCased: String {
    let words = split(separator: "-")
    return words.enumerated().map { $0 == 0 ? String($1) : $1.prefix(1).uppercased() + $1.dropFirst() }.joined()
  }

  /// `hideSystemLibraries` → `hide-system-libraries`, what `CallTreeOptions(parsing:)` reads.
  fileprivate var kebabCased: String {
    var out = ""
    for character in self {
      if character.isUppercase { out += "-" + character.lowercased() } else { out.append(character) }
    }
    return out
  }
}

/// `text` as a serialized DOM shows it in a text node.
func htmlEscaped(_ text: String) -> String {
  text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
    .replacingOccurrences(of: ">", with: "&gt;")
}
