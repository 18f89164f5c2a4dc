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
    return try write(
      report,
      to: URL(fileURLWithPath: directory).appendingPathComponent(report.scenario.name)
        .appendingPathComponent(report.scenario.variant))
  }

  /// Writes into `folder` itself (a recorded program's reports have no variant folder).
  /// - Returns: the path of the JSON report.
  func write(_ report: Report, to folder: URL) throws -> String {
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
    for export in ReportExport.all {
      let files: [(name: String, contents: Data)]
      do {
        files = try export.files(report)
      } catch {
        throw HarnessError("cannot write the \(export.kind.rawValue) export of \(report.scenario.name): \(error)")
      }
      for file in files { try write(file.name) { file.contents } }
    }
    return file.path
  }
}

extension ReportWriter {
  /// `DIR/index.html`, one page linking every report of this run (`folder` relative to
  /// DIR), its path printed last: the one line a person needs to open what the run found.
  func writeIndex(_ written: [(report: Report, folder: String)], format: OutputFormat) throws {
    let index = URL(fileURLWithPath: directory).appendingPathComponent("index.html")
    do {
      try Data(RunIndexHTML.render(written).utf8).write(to: index, options: .atomic)
    } catch {
      throw HarnessError(
        "cannot write \(index.path): \(error.localizedDescription); pass a writable directory with --output")
    }
    switch format {
    case .text: print("index: \(index.path)")
    case .markdown: print("All reports of this run: `\(index.path)`")
    case .json: break
    }
  }

  /// The POSIX reason under a Foundation file error, which itself says only "The operation
  /// could not be completed".
  static func describe(_ error: any Error) -> String {
    let nsError = error as NSError
    if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
      return String(cString: strerror(Int32(underlying.code)))
    }
    return nsError.domain == NSPOSIXErrorDomain ? String(cString: strerror(Int32(nsError.code))) : "\(error)"
  }

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

/// The folder a run writes its report into, `DIR/<scenario>/<variant>/`, held by this run
/// until its report is written: a concurrent run into it is refused, and what an earlier
/// run left there (its leak-cycle-N.dot files, its profiles, a temporary file of a harness
/// killed while writing) is removed first, so the folder holds one run's files.
final class ReportFolder {
  let url: URL
  private let descriptor: Int32

  /// - Throws: `HarnessError` naming the folder when another run holds it or it cannot be
  ///   created or emptied.
  convenience init(directory: String, scenario: String, variant: String) throws {
    for name in [scenario, variant] where !Scenario.isValidName(name) {
      throw HarnessError("'\(name)' is not a valid scenario or variant name (lowercase letters, digits and '-')")
    }
    try self.init(url: URL(fileURLWithPath: directory).appendingPathComponent(scenario).appendingPathComponent(variant))
  }

  init(url: URL) throws {
    self.url = url
    do {
      try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    } catch {
      throw HarnessError(
        "cannot create the report folder \(url.path): \(error.localizedDescription); pass a writable directory with --output"
      )
    }
    // The folder itself is locked: a lock file would have to stay behind, or its removal
    // would race with a run that had just opened it.
    descriptor = open(url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard descriptor >= 0 else {
      throw HarnessError("cannot open the report folder \(url.path): \(String(cString: strerror(errno)))")
    }
    guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
      let reason =
        errno == EWOULDBLOCK ? "another perfharness run is writing its report there" : String(cString: strerror(errno))
      close(descriptor)
      throw HarnessError(
        "cannot use the report folder \(url.path): \(reason); wait for that run to end or pass another --output")
    }
    do {
      for entry in try FileManager.default.contentsOfDirectory(atPath: url.path) {
        try FileManager.default.removeItem(at: url.appendingPathComponent(entry))
      }
    } catch {
      close(descriptor)
      throw HarnessError("cannot empty the report folder \(url.path) for this run: \(ReportWriter.describe(error))")
    }
  }

  deinit { close(descriptor) }
}
