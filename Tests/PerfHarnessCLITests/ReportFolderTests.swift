import Foundation
import PerfHarness
import Testing

@testable import PerfHarnessCLI

/// Each run owns its report folder: it removes only what an earlier run wrote there, never
/// follows a link in place of a folder it makes, and a second run into it while the first
/// writes is refused.
@Suite("Report folders")
struct ReportFolderTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")
  let perfharness = try! BuiltBinary("perfharness")

  @Test("before a run, only what perfharness wrote is removed: the last run's files and temporaries go, a user's stay")
  func onlyTheHarnessFilesAreRemoved() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let arguments = ["scenario", "completes", "--output", directory.path]
    #expect(try fixtures.run(arguments + ["--instruments", "time,allocations"]).status == 0)
    let folder = directory.appendingPathComponent("completes/starter")
    let earlier = try FileManager.default.contentsOfDirectory(atPath: folder.path)
    #expect(earlier.contains("allocations.folded"), "\(earlier)")
    let user = try UserFiles(in: folder, ["notes.txt", "mine/keep.txt"])
    // What a killed run leaves: a write's temporary file, a child's result, record's results.
    for name in [".perfharness-tmp-4242-report.html", ".perfharness-child-4242.json", ".perfharness-results-4242/x"] {
      try user.add(name, in: folder)
    }
    let result = try fixtures.run(arguments + ["--instruments", "none"])
    #expect(result.status == 0, "\(result.standardError)")
    let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
    #expect(files == [ReportFolder.manifestName, "mine", "notes.txt", "report.html", "report.json"])
    #expect(user.now(in: folder) == user.files)
    let manifest = try String(contentsOf: folder.appendingPathComponent(ReportFolder.manifestName), encoding: .utf8)
    #expect(manifest == "report.json\nreport.html\n")
  }

  @Test(
    "a link in place of the scenario or variant folder is refused, naming it, and what it points to is untouched: exit 1",
    arguments: ["completes", "completes/starter"])
  func linkedFolderIsRefused(linked: String) throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let precious = try UserFiles(in: directory.appendingPathComponent("precious"), ["precious.txt", "sub/id_rsa"])
    let output = directory.appendingPathComponent("reports")
    let link = output.appendingPathComponent(linked)
    try FileManager.default.createDirectory(at: link.deletingLastPathComponent(), withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(at: link, withDestinationURL: precious.url)
    let result = try fixtures.run(["scenario", "completes", "--instruments", "none", "--output", output.path])
    #expect(result.status == 1, "\(result.standardError)")
    #expect(
      result.standardError.contains(
        "cannot use the report folder \(link.path): it is a symbolic link (to \(precious.url.path))"),
      "\(result.standardError)")
    #expect(try precious.now() == precious.files)
  }

  @Test("--output itself may be a link the user made: the run writes into the folder it points to")
  func outputMayBeALink() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let disk = directory.appendingPathComponent("disk")
    try FileManager.default.createDirectory(at: disk, withIntermediateDirectories: true)
    let output = directory.appendingPathComponent("reports")
    try FileManager.default.createSymbolicLink(at: output, withDestinationURL: disk)
    let result = try fixtures.run(["scenario", "completes", "--instruments", "none", "--output", output.path])
    #expect(result.status == 0, "\(result.standardError)")
    #expect(FileManager.default.fileExists(atPath: disk.appendingPathComponent("completes/starter/report.json").path))
  }

  @Test("a hand-edited manifest removes nothing outside the folder or through a link, and no file it does not name")
  func manifestStaysInTheFolder() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let precious = try UserFiles(in: directory.appendingPathComponent("precious"), ["precious.txt", "sub/id_rsa"])
    let output = directory.appendingPathComponent("reports")
    let folder = output.appendingPathComponent("completes/starter")
    let user = try UserFiles(in: folder, ["notes.txt"])
    try FileManager.default.createSymbolicLink(
      at: folder.appendingPathComponent("link"), withDestinationURL: precious.url)
    let lines = [
      "../../../precious/precious.txt", "\(precious.url.path)/precious.txt", "link/precious.txt", "link/sub/id_rsa",
      "./link/sub/id_rsa", "link",
    ]
    try Data(lines.map { $0 + "\n" }.joined().utf8).write(to: folder.appendingPathComponent(ReportFolder.manifestName))
    _ = try ReportFolder(directory: output.path, scenario: "completes", variant: "starter")
    #expect(try precious.now() == precious.files)
    #expect(user.now(in: folder) == user.files)
    // Listed, the link is removed itself: never what it points to.
    #expect(
      (try? FileManager.default.destinationOfSymbolicLink(atPath: folder.appendingPathComponent("link").path)) == nil)
  }

  @Test("record: a link in place of DIR/<name> is refused, naming it, and what it points to is untouched: exit 1")
  func recordLinkedFolderIsRefused() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let precious = try UserFiles(in: directory.appendingPathComponent("precious"), ["precious.txt", "sub/id_rsa"])
    let output = directory.appendingPathComponent("reports")
    let link = output.appendingPathComponent("true")
    try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
    try FileManager.default.createSymbolicLink(at: link, withDestinationURL: precious.url)
    let result = try perfharness.run(["record", "--output", output.path, "--", "/bin/true"])
    #expect(result.status == 1, "\(result.standardError)")
    #expect(
      result.standardError.contains(
        "cannot use the report folder \(link.path): it is a symbolic link (to \(precious.url.path))"),
      "\(result.standardError)")
    #expect(try precious.now() == precious.files)
  }

  @Test("record: a directory as CMD is a usage error naming it, before any output folder is made: exit 64")
  func recordDirectoryIsRefused() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let program = directory.appendingPathComponent("tool")
    try FileManager.default.createDirectory(at: program, withIntermediateDirectories: true)
    let output = directory.appendingPathComponent("reports")
    let result = try perfharness.run(["record", "--output", output.path, "--", program.path])
    #expect(result.status == 64, "\(result.standardError)")
    #expect(
      result.standardError.contains(
        "cannot run '\(program.path)': it is a directory; accepted: an executable file, by path or by name on PATH"),
      "\(result.standardError)")
    #expect(!FileManager.default.fileExists(atPath: output.path))
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

/// Files someone other than perfharness put in a folder, with their contents to compare
/// byte for byte after a run.
private struct UserFiles {
  let url: URL
  let files: [String: Data]

  /// Writes `paths` under `url`, each with its own contents (a key's worth of random bytes).
  init(in url: URL, _ paths: [String]) throws {
    self.url = url
    var files: [String: Data] = [:]
    for path in paths { files[path] = Data((0..<512).map { _ in UInt8.random(in: 0...255) } + Array(path.utf8)) }
    self.files = files
    for (path, data) in files { try Self.write(data, to: url.appendingPathComponent(path)) }
  }

  /// Adds a file outside `files`, under `folder`.
  func add(_ path: String, in folder: URL) throws {
    try Self.write(Data("stale".utf8), to: folder.appendingPathComponent(path))
  }

  private static func write(_ data: Data, to file: URL) throws {
    try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
    try data.write(to: file)
  }

  /// Every file now under `url`, by relative path: one added or removed shows.
  func now() throws -> [String: Data] {
    var found: [String: Data] = [:]
    let walker = FileManager.default.enumerator(atPath: url.path)
    while let path = walker?.nextObject() as? String {
      var isFolder: ObjCBool = false
      let file = url.appendingPathComponent(path).path
      if FileManager.default.fileExists(atPath: file, isDirectory: &isFolder), !isFolder.boolValue {
        found[path] = try Data(contentsOf: URL(fileURLWithPath: file))
      }
    }
    return found
  }

  /// The files `files` names, as they are now under `folder`.
  func now(in folder: URL) -> [String: Data] {
    files.keys.reduce(into: [:]) { found, path in
      found[path] = FileManager.default.contents(atPath: folder.appendingPathComponent(path).path)
    }
  }
}
