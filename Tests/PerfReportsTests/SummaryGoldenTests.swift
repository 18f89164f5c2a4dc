import Foundation
import Testing

@testable import PerfHarness
@testable import PerfReports

/// The text and markdown summaries of one fixed report
/// (Tests/Fixtures/SummaryGolden/server-report.json: a server
/// recorded with `record`, two worker threads doing the work, a baseline it regressed
/// against, no --check) against checked-in expected files. A change to either renderer
/// shows here as a diff to read; regenerate the expected files only deliberately:
/// `make golden` (PERFHARNESS_REGENERATE_GOLDEN=1 swift test --filter SummaryGoldenTests).
@Suite("Text and markdown summaries of a fixed report")
struct SummaryGoldenTests {
  static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/SummaryGolden")
  static let regenerate = ProcessInfo.processInfo.environment["PERFHARNESS_REGENERATE_GOLDEN"] == "1"

  static func serverReport() throws -> Report {
    try ReportJSON.decode(Data(contentsOf: folder.appendingPathComponent("server-report.json")))
  }

  enum Renderer: String, CaseIterable, Sendable {
    case text = "server-summary.txt"
    case markdown = "server-summary.md"

    func render(_ report: Report) -> String {
      let json = "Reports/server/report.json"
      let page = "Reports/server/report.html"
      switch self {
      case .text: return RunSummaryText.render(report, reportPath: json, pagePath: page)
      case .markdown: return MarkdownSummary.render(report, reportPath: json, pagePath: page)
      }
    }
  }

  @Test("each renderer's output is the expected file", arguments: Renderer.allCases)
  func golden(renderer: Renderer) throws {
    let file = renderer.rawValue
    let rendered = renderer.render(try Self.serverReport())
    let expectedURL = Self.folder.appendingPathComponent(file)
    if Self.regenerate {
      try Data(rendered.utf8).write(to: expectedURL)
      return
    }
    let expected = try String(contentsOf: expectedURL, encoding: .utf8)
    // Line by line: a failure names the first line that differs, not two whole pages.
    let got = rendered.split(separator: "\n", omittingEmptySubsequences: false)
    let want = expected.split(separator: "\n", omittingEmptySubsequences: false)
    for (index, (line, wanted)) in zip(got, want).enumerated() where line != wanted {
      Issue.record("\(file) line \(index + 1):\n  got:      \(line)\n  expected: \(wanted)")
      break
    }
    #expect(got.count == want.count, "\(file): \(got.count) lines, expected \(want.count)")
  }

  /// The fixture's stored top functions are what its samples give, as the recorder derives
  /// them: the expected files then show numbers a real run of that profile would.
  @Test("the fixed report's top functions agree with its samples")
  func fixtureIsConsistent() throws {
    let profile = try #require(try Self.serverReport().timeProfile)
    let merged = profile.profile.topFunctions(hideSystemLibraries: true, limit: 25)
    #expect(merged.map(\.symbol) == profile.topFunctions.map(\.symbol))
    #expect(merged.map(\.selfWeight) == profile.topFunctions.map(\.selfWeight))
    #expect(merged.map(\.totalWeight) == profile.topFunctions.map(\.totalWeight))
  }

  /// A server's main thread starts it up in 3 ms; the workers do 99.8 % of the work.
  @Test("a server's summary shows the workers' functions and call tree, not only the main thread's start-up")
  func serverFollowsTheWork() throws {
    let text = TimeProfileText.render(try #require(try Self.serverReport().timeProfile))
    let lines = text.split(separator: "\n").map(String.init)
    let top = try #require(lines.firstIndex { $0.hasPrefix("  Top functions ") })
    #expect(lines[top] == "  Top functions of all 3 threads merged (Hide System Libraries):")
    #expect(lines[top + 2].hasSuffix("Server.JSON.parse(_:) [server]"), "\(lines[top + 2])")
    let tree = try #require(lines.firstIndex { $0.hasPrefix("  Call tree ") })
    #expect(lines[tree].hasPrefix("  Call tree of all 3 threads merged"))
    #expect(lines[tree...].contains { $0.contains("Server.Handler.handle(_:) [server]") })
  }

  @Test("a profile of one thread is shown as that thread's")
  func oneThread() throws {
    var profile = try #require(try Self.serverReport().timeProfile)
    profile.profile.samples.removeAll { $0.thread != 0 }
    profile.threads.removeAll { !$0.isMain }
    let text = TimeProfileText.render(profile)
    #expect(text.contains("  Top functions of the Main Thread (Hide System Libraries):\n"))
    #expect(text.contains("  Call tree of the Main Thread (Hide System Libraries; rows under 5% folded):\n"))
    #expect(text.contains("Server.startUp() [server]"))
    #expect(!text.contains("Server.JSON.parse"))
  }
}

@Suite("Summary wording: counts and shares as a person reads them")
struct SummaryWordingTests {
  @Test(
    "coverage reads 100 % within the clocks' difference, the measured figure beyond it",
    arguments: [
      (100.3, 1_600.0, 1.0, 1, "100.0%"), (103.4, 2.9, 1.0, 0, "100%"), (95.25, 1_000.0, 1.0, 1, "95.2%"),
      (130.0, 1_000.0, 1.0, 1, "130.0%"), (102.0, 1_000.0, 1.0, 0, "102%"),
    ])
  func coverage(percent: Double, cpu: Double, slack: Double, decimals: Int, shown: String) {
    #expect(TimeProfileText.coverageText(percent, of: cpu, slack: slack, decimals: decimals) == shown)
  }

  @Test("the recorder's losses are counted in the singular and the plural")
  func losses() {
    let lost = AllocationsReport.Lost(blocks: 1, stacks: 2, freedCategories: 1, timelinePoints: 0)
    #expect(
      AllocationsText.lossText(lost)
        == "; LOST: 1 block not tracked, 1 free with the type lost, 2 allocations without a stack")
  }
}
