import Foundation

/// Reads a file someone hands the harness, up to a size cap: a file over it is refused
/// before it is read whole (a 32 MB thresholds file took 53 s and 1.1 GB in the YAML
/// parser; a 1 GB report up to 3.2 GB decoded). Works on pipes too (`<(...)`).
public enum BoundedFile {
  /// A thresholds or suppressions file: a limit per line, so a megabyte is tens of
  /// thousands of types.
  public static let settingsLimit = 1 << 20
  /// A report: a long run with every instrument and full stacks stays far below it.
  public static let reportLimit = 256 << 20

  public struct TooLarge: Error, CustomStringConvertible {
    public var path: String
    public var limit: Int
    public var description: String {
      "\(path) is larger than \(ByteSize(bytes: limit)); accepted: a file of at most \(ByteSize(bytes: limit))"
    }
  }

  /// - Throws: `TooLarge`, or the error of opening or reading the file.
  public static func read(_ path: String, limit: Int) throws -> Data {
    let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    // A regular file says its size: one over the cap is refused without reading it.
    if let size = try? handle.seekToEnd() {
      if size > UInt64(limit) { throw TooLarge(path: path, limit: limit) }
      try handle.seek(toOffset: 0)
    }
    var data = Data()
    while let chunk = try handle.read(upToCount: min(limit + 1 - data.count, 1 << 20)), !chunk.isEmpty {
      data.append(chunk)
      if data.count > limit { throw TooLarge(path: path, limit: limit) }
    }
    return data
  }
}
