import Foundation
import PerfHarness
import PerfReports

/// Writes a run's files under the output directory.
struct ReportWriter {
  var directory: String

  /// The paths a summary prints: the JSON for machines and `report compare`, the page for
  /// people.
  struct Written {
    var json: String
    var page: String
  }

  /// Writes `report`'s files into `folder`, or into `subfolder` of it (a recorded
  /// program's child process).
  /// - Returns: the paths of the JSON report and of its HTML page.
  /// - Throws: `HarnessError` naming the file that could not be written.
  @discardableResult
  func write(_ report: Report, into folder: ReportFolder, subfolder: String? = nil) throws -> Written {
    let prefix = subfolder.map { "\($0)/" } ?? ""
    func write(_ name: String, _ contents: () throws -> Data) throws {
      let data: Data
      do {
        data = try contents()
      } catch {
        throw HarnessError("cannot write \(folder.url.appendingPathComponent(prefix + name).path): \(error)")
      }
      try folder.write(data, to: prefix + name)
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
    return Written(
      json: folder.url.appendingPathComponent(prefix + "report.json").path,
      page: folder.url.appendingPathComponent(prefix + "report.html").path)
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
    case .text: print("index: \(TerminalText.inline(index.path))")
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

  /// Writes `name` in the open `folder` through a temporary file renamed into place, so a
  /// reader never sees half a file and a link at the name is replaced, not followed; unlike
  /// Data.write(options: .atomic), a failure says why (File too large, No space left on
  /// device), and the temporary file is removed. `path` names the file in messages.
  static func writeAtomically(_ data: Data, named name: String, in folder: Int32, shownAs path: URL) throws {
    let temporary = "\(temporaryPrefix)\(getpid())-\(name)"
    func failure(_ what: String) -> HarnessError {
      let reason = String(cString: strerror(errno))
      unlinkat(folder, temporary, 0)
      return HarnessError("cannot write \(path.path): \(what): \(reason)")
    }
    let descriptor = openat(folder, temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
    guard descriptor >= 0 else { throw failure("cannot create \(temporary)") }
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
    guard renameat(folder, temporary, folder, name) == 0 else { throw failure("rename") }
  }
}

/// A harness failure that is not the user's input: exit code 1 with a message.
struct HarnessError: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}
