import Foundation
import PerfHarness
import PerfReports

/// Writes a run's files under the output directory.
struct ReportWriter {
  var directory: String

  /// - Returns: the path of the JSON report.
  /// - Throws: `HarnessError` naming the file that could not be written.
  func write(_ report: Report) throws -> String {
    // The names become folder names: one that is not a plain name could write elsewhere.
    for name in [report.scenario.name, report.scenario.variant] where !Scenario.isValidName(name) {
      throw HarnessError(
        "cannot write the report: '\(name)' is not a valid scenario or variant name (lowercase letters, digits and '-')"
      )
    }
    let folder = URL(fileURLWithPath: directory)
      .appendingPathComponent(report.scenario.name)
      .appendingPathComponent(report.scenario.variant)
    let file = folder.appendingPathComponent("report.json")
    do {
      try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    } catch {
      throw HarnessError(
        "cannot create the report folder \(folder.path): \(error.localizedDescription); pass a writable directory with --output"
      )
    }
    func write(_ name: String, _ contents: () throws -> Data) throws {
      let path = folder.appendingPathComponent(name)
      let data: Data
      do {
        data = try contents()
      } catch {
        throw HarnessError("cannot write \(path.path): \(error)")
      }
      try Self.writeAtomically(data, to: path)
    }
    try write("report.json") { try ReportJSON.encode(report) }
    try write("report.html") { try Data(HTMLReport.render(report).utf8) }
    for (index, cycle) in (report.leaks?.cycles ?? []).enumerated() {
      try write("leak-cycle-\(index + 1).dot") {
        Data(cycle.dot(title: "cycle \(index + 1) (x\(cycle.instances))").utf8)
      }
    }
    if let profile = report.timeProfile?.profile {
      try write("profile.folded") { Data(FoldedStacks.render(profile).utf8) }
      try write("profile.speedscope.json") {
        try Speedscope.render(profile, name: "\(report.scenario.name) [\(report.scenario.variant)]")
      }
      try write("profile.pb.gz") { Pprof.cpuProfile(profile) }
    }
    if let allocations = report.allocations, let heap = Pprof.heapProfile(allocations) {
      try write("allocations.folded") { Data(AllocationsFolded.render(allocations).utf8) }
      try write("heap.pb.gz") { heap }
    }
    return file.path
  }
}

extension ReportWriter {
  /// The prefix of the temporary file a write renames into place.
  static let temporaryPrefix = ".perfharness-tmp-"

  /// Writes through a temporary file renamed into place, so a reader never sees half a
  /// file; unlike Data.write(options: .atomic), a failure says why (File too large, No
  /// space left on device), and the temporary file is removed.
  static func writeAtomically(_ data: Data, to path: URL) throws {
    let folder = path.deletingLastPathComponent()
    let temporary = folder.appendingPathComponent("\(temporaryPrefix)\(getpid())-\(path.lastPathComponent)")
    func failure(_ what: String) -> HarnessError {
      let reason = String(cString: strerror(errno))
      unlink(temporary.path)
      return HarnessError("cannot write \(path.path): \(what): \(reason)")
    }
    let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard descriptor >= 0 else { throw failure("cannot create \(temporary.lastPathComponent)") }
    var written = 0
    let complete = data.withUnsafeBytes { bytes -> Bool in
      while written < bytes.count {
        let result = Glibc.write(descriptor, bytes.baseAddress! + written, bytes.count - written)
        if result < 0 && errno == EINTR { continue }
        guard result > 0 else { return false }
        written += result
      }
      return true
    }
    guard complete else {
      let saved = errno
      close(descriptor)
      errno = saved
      throw failure("after \(written) of \(data.count) bytes")
    }
    guard close(descriptor) == 0 else { throw failure("close") }
    guard rename(temporary.path, path.path) == 0 else { throw failure("rename") }
  }
}

/// A harness failure that is not the user's input: exit code 1 with a message.
struct HarnessError: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}
