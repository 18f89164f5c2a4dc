import Foundation
import PerfBenchSupport
import Testing

@testable import PerfHarness
@testable import PerfReports

/// What the program controls reaches the terminal as escapes, never as control characters.
@Suite("Program-controlled strings on a terminal")
struct TerminalTextTests {
  @Test(
    "Control characters become escapes; other text, backslashes and non-ASCII letters stay",
    arguments: [
      ("plain label", "plain label"),
      ("a\nb", "a\\nb"),
      ("\u{1B}[2J\u{1B}]0;owned\u{07}", "\\e[2J\\e]0;owned\\x07"),
      ("tab\there\rback", "tab\\there\\rback"),
      ("del\u{7F} csi\u{9B}", "del\\x7f csi\\u{9b}"),
      ("C:\\path é ✓", "C:\\path é ✓"),
    ])
  func inline(text: String, shown: String) {
    #expect(TerminalText.inline(text) == shown)
  }

  @Test("A rendered text keeps its own line breaks and escapes the rest")
  func lines() {
    #expect(TerminalText.lines("one\ntwo \u{1B}[31mred\r\n") == "one\ntwo \\e[31mred\\r\n")
  }

  @Test("A run summary with a hostile label, thread name and argument prints no control character and no forged line")
  func hostileSummary() throws {
    var report = try HTMLReport.syntheticReport(samples: 200, stackDepth: 8, allocations: 2_000)
    let forged = "\nChecks: 0 failed\u{1B}[2K\r"
    report.marks = [GenerationMark(index: 1, label: "drill-down" + forged, timeMilliseconds: 1, isMemoryWarning: false)]
    report.program = ProgramInfo(executable: "/bin/app\u{1B}]0;title\u{07}", arguments: ["--name", forged], pid: 1)
    if var profile = report.timeProfile, !profile.threads.isEmpty {
      profile.threads[0].name = "worker" + forged
      report.timeProfile = profile
    }
    let plain = RunSummaryText.render(report, reportPath: nil)
    let shown = TerminalText.lines(plain)
    #expect(!shown.unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" })
    #expect(!shown.split(separator: "\n").contains { $0.hasPrefix("Checks: 0 failed") })
    #expect(shown.contains("drill-down\\nChecks: 0 failed\\e[2K\\r"))
    // Before: the renderer passed the newlines through, and the forged line stood alone.
    #expect(plain.split(separator: "\n").allSatisfy { !$0.hasPrefix("Checks: 0 failed") })
  }
}
