import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// Reads a file someone hands the harness, up to a size cap: a file over it is refused
/// before it is read whole (a 32 MB thresholds file took 53 s and 1.1 GB in the YAML
/// parser; a 1 GB report up to 3.2 GB decoded). Only a regular file is read: a FIFO with no
/// writer blocked the open forever, /dev/zero never ends and a folder has no contents.
public enum BoundedFile {
  /// A thresholds or suppressions file: a limit per line, so a megabyte is tens of
  /// thousands of types.
  public static let settingsLimit = 1 << 20
  /// The recording settings the harness writes for its scenario child or its preloaded
  /// recorder: they carry a parsed suppressions file (up to `settingsLimit`) whose JSON
  /// takes up to about six times its text (a one-letter pattern per line; control
  /// characters escaped as `\u00XX`). Read with the suppressions cap, settings from a
  /// 450 KB file were cut off and the program ran unrecorded. The options are checked
  /// against this limit before anything runs.
  public static let handOverLimit = 16 * settingsLimit
  /// A report: a long run with every instrument and full stacks stays far below it.
  public static let reportLimit = 256 << 20

  public struct TooLarge: Error, CustomStringConvertible {
    public var path: String
    public var limit: Int
    public var description: String {
      "\(path) is larger than \(ByteSize(bytes: limit)); accepted: a file of at most \(ByteSize(bytes: limit))"
    }
  }

  /// A path that names a FIFO, a device, a socket or a folder.
  public struct NotARegularFile: Error, CustomStringConvertible {
    public var path: String
    /// "a FIFO", "a character device", …
    public var kind: String
    public var description: String { "\(path) is \(kind); accepted: a regular file" }
  }

  /// The file cannot be opened: `reason` is the system's ("No such file or directory").
  public struct CannotOpen: LocalizedError, CustomStringConvertible {
    public var path: String
    public var reason: String
    public var errorDescription: String? { reason }
    public var description: String { "\(path): \(reason)" }
  }

  /// - Throws: `NotARegularFile`, `TooLarge`, `CannotOpen`, or the error of reading the file.
  public static func read(_ path: String, limit: Int) throws -> Data {
    // stat never opens: a device whose open has side effects is not even opened.
    var status = stat()
    if stat(path, &status) == 0, let kind = specialKind(status) {
      throw NotARegularFile(path: path, kind: kind)
    }
    // Non-blocking, should it have become a FIFO since: the open returns at once.
    let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
    guard descriptor >= 0 else { throw CannotOpen(path: path, reason: String(cString: strerror(errno))) }
    let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    defer { try? handle.close() }
    guard fstat(descriptor, &status) == 0 else {
      throw CannotOpen(path: path, reason: String(cString: strerror(errno)))
    }
    if let kind = specialKind(status) { throw NotARegularFile(path: path, kind: kind) }
    // A regular file says its size: one over the cap is refused without reading it.
    if UInt64(max(status.st_size, 0)) > UInt64(limit) { throw TooLarge(path: path, limit: limit) }
    var data = Data()
    // Still capped while reading: the file may grow meanwhile.
    while let chunk = try handle.read(upToCount: min(limit + 1 - data.count, 1 << 20)), !chunk.isEmpty {
      data.append(chunk)
      if data.count > limit { throw TooLarge(path: path, limit: limit) }
    }
    return data
  }

  /// What a file that is not a regular one is, for messages; nil for a regular file.
  public static func specialKind(_ status: stat) -> String? {
    switch status.st_mode & S_IFMT {
    case S_IFREG: nil
    case S_IFIFO: "a FIFO"
    case S_IFCHR: "a character device"
    case S_IFBLK: "a block device"
    case S_IFDIR: "a folder"
    case S_IFSOCK: "a socket"
    default: "a special file"
    }
  }

  /// What `path` is when it exists and is not a regular file ("a FIFO", "a folder"); nil for
  /// a regular file or a path that names nothing. Never opens it.
  public static func specialKind(at path: String) -> String? {
    var status = stat()
    guard stat(path, &status) == 0 else { return nil }
    return specialKind(status)
  }
}
