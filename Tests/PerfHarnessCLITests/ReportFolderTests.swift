import Foundation
import PerfHarness
import Testing

@testable import PerfHarnessCLI

/// Each run owns its report folder: it holds that run's files only, and a second run into
/// it while the first writes is refused.
@Suite("Report folders")
struct ReportFolderTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  @Test("what an earlier run left in the folder is gone: its leak cycles, profiles and a killed write's temporary file")
  func earlierFilesAreRemoved() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let folder = directory.appendingPathComponent("completes/starter")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    let stale = [
      "leak-cycle-3.dot", "profile.folded", "profile.speedscope.json", ".perfharness-tmp-4242-report.html",
      ".perfharness-child-4242.json",
    ]
    for name in stale { try Data("stale".utf8).write(to: folder.appendingPathComponent(name)) }
    let result = try fixtures.run(["scenario", "completes", "--instruments", "none", "--output", directory.path])
    #expect(result.status == 0, "\(result.standardError)")
    let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
    #expect(files == ["report.html", "report.json"])
  }

  @Test("a second run into a folder another run is writing is refused, naming the folder: exit 1")
  func concurrentRunIsRefused() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let first = try fixtures.start(["scenario", "hang-with-a-process", "--output", directory.path])
    #expect(first.waitForStandardError(containing: "hanging now"), "\(first.standardErrorSoFar)")
    let second = try fixtures.run(["scenario", "hang-with-a-process", "--output", directory.path])
    kill(first.pid, SIGTERM)
    let firstResult = try first.wait()

    let folder = directory.appendingPathComponent("hang-with-a-process/starter")
    #expect(second.status == 1, "\(second.standardError)")
    #expect(
      second.standardError.contains(
        "cannot use the report folder \(folder.path): another perfharness run is writing its report there"),
      "\(second.standardError)")
    // The first run's report is whole and its own.
    #expect(firstResult.status == 143)
    let report = try JSONDecoder().decode(
      Report.self, from: Data(contentsOf: folder.appendingPathComponent("report.json")))
    #expect(report.status == .interrupted)
    let html = try String(contentsOf: folder.appendingPathComponent("report.html"), encoding: .utf8)
    #expect(html.contains("interrupted"))
  }

  @Test("--baseline may name the folder the run writes into: the stored report is read before it is replaced")
  func baselineInTheOutputFolder() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let arguments = ["scenario", "completes", "--instruments", "allocations", "--output", directory.path]
    #expect(try fixtures.run(arguments).status == 0)
    let result = try fixtures.run(arguments + ["--baseline", directory.path])
    #expect(result.status == 0, "\(result.standardError)")
    let file = directory.appendingPathComponent("completes/starter/report.json")
    let report = try JSONDecoder().decode(Report.self, from: Data(contentsOf: file))
    #expect(report.comparison?.baseline == file.path)
  }

  @Test("a hand-edited report with a duplicated key is refused by report and compare, naming the key: exit 1")
  func duplicateKeyIsRefused() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    #expect(
      try fixtures.run(["scenario", "completes", "--instruments", "none", "--output", directory.path]).status == 0)
    let file = directory.appendingPathComponent("completes/starter/report.json")
    let text = try String(contentsOf: file, encoding: .utf8)
    let edited = directory.appendingPathComponent("edited.json")
    let replaced = text.replacingOccurrences(
      of: #""status" : "passed""#, with: #""status" : "failed", "status" : "passed""#)
    #expect(replaced != text)
    try Data(replaced.utf8).write(to: edited)
    let perfharness = try BuiltBinary("perfharness")
    for arguments in [
      ["report", edited.path, "--html", directory.appendingPathComponent("edited.html").path],
      ["compare", file.path, edited.path],
    ] {
      let result = try perfharness.run(arguments)
      #expect(result.status == 1, "\(arguments) \(result.standardError)")
      #expect(result.standardError.contains("the key 'status' appears twice in one object"), "\(result.standardError)")
    }
    #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("edited.html").path))
  }
}
