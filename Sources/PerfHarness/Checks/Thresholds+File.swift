import Foundation
import Yams

/// A thresholds file that cannot be used: names the file, the line and the field.
public struct ThresholdsFileError: Error, CustomStringConvertible, Sendable {
  public var path: String
  public var line: Int?
  public var message: String

  public var description: String {
    "\(path)\(line.map { ":\($0)" } ?? ""): \(message)"
  }
}

extension Thresholds {
  /// The keys a thresholds file may use.
  public static var fileKeys: [String] { Limit.all.map(\.key) }

  /// Reads a thresholds file:
  /// ```yaml
  /// max-growth-per-generation: 64 KB   # after the warm-up generations
  /// warm-up-generations: 1
  /// max-leaked-bytes: 0
  /// max-cycles: 0
  /// max-persistent:
  ///   MyApp.DetailViewController: 1
  /// max-peak-heap: 64 MiB
  /// min-coverage: 95%                  # of the threads' CPU time, in samples
  /// ```
  public static func load(contentsOf path: String) throws -> Thresholds {
    let text: String
    do {
      text = String(decoding: try BoundedFile.read(path, limit: BoundedFile.settingsLimit), as: UTF8.self)
    } catch let error as BoundedFile.TooLarge {
      throw ThresholdsFileError(
        path: path, line: nil,
        message:
          "it is larger than \(ByteSize(bytes: error.limit)); accepted: a thresholds file of at most \(ByteSize(bytes: error.limit))"
      )
    } catch let error as BoundedFile.NotARegularFile {
      throw ThresholdsFileError(
        path: path, line: nil, message: "it is \(error.kind); accepted: a thresholds file, a regular file")
    } catch {
      throw ThresholdsFileError(path: path, line: nil, message: "cannot read it: \(error.localizedDescription)")
    }
    return try parse(text, path: path)
  }

  /// - Parameter path: named in errors.
  public static func parse(_ text: String, path: String) throws -> Thresholds {
    let root: Node?
    do {
      root = try Yams.compose(yaml: text)
    } catch let error as YamlError {
      throw ThresholdsFileError(path: path, line: error.line, message: "not valid YAML: \(error.summary)")
    } catch {
      throw ThresholdsFileError(path: path, line: nil, message: "not valid YAML: \(error)")
    }
    var thresholds = Thresholds()
    guard let root else { return thresholds }
    guard let mapping = root.mapping else {
      throw ThresholdsFileError(
        path: path, line: root.mark?.line, message: "expected a mapping of \(fileKeys.joined(separator: ", "))")
    }
    for (keyNode, value) in mapping {
      let key = keyNode.string ?? ""
      let line = keyNode.mark?.line
      func fail(_ message: String) -> ThresholdsFileError {
        ThresholdsFileError(path: path, line: line, message: "\(key): \(message)")
      }
      guard let limit = Limit.named(key) else {
        throw fail("unknown key; accepted: \(fileKeys.joined(separator: ", "))")
      }
      guard limit.form == .typeCounts else {
        guard let text = value.scalar?.string, let parsed = limit.parse(text) else {
          throw fail(limit.rejection(of: value.scalar?.string ?? "…"))
        }
        limit.set(parsed, in: &thresholds)
        continue
      }
      guard let types = value.mapping else {
        throw fail("expected a mapping of type names to counts, e.g. 'MyApp.Screen: 1'")
      }
      for (typeNode, limitNode) in types {
        guard let type = typeNode.string, !type.isEmpty, let text = limitNode.scalar?.string,
          let count = Limit.count(parsing: text)
        else {
          throw ThresholdsFileError(
            path: path, line: typeNode.mark?.line,
            message: "\(key): expected 'TypeName: count' with a whole number, 0 or more")
        }
        guard count <= Limit.largestValue else {
          throw ThresholdsFileError(
            path: path, line: typeNode.mark?.line,
            message: "\(key): \(type): '\(text)' is too large; accepted: \(limit.rangeDescription)")
        }
        limit.set(.typeCount(type, count), in: &thresholds)
      }
    }
    return thresholds
  }
}

extension YamlError {
  /// The line the problem is on (1-based), when the parser knows it.
  fileprivate var line: Int? {
    switch self {
    case .scanner(_, _, let mark, _), .parser(_, _, let mark, _), .composer(_, _, let mark, _): mark.line
    case .duplicatedKeysInMapping(_, let context): context.mark.line
    default: nil
    }
  }

  /// The problem without Yams's snippet of the offending line, which repeats the whole line
  /// (megabytes, for a one-line file) in every message.
  fileprivate var summary: String {
    let text: String
    switch self {
    case .scanner(let context, let problem, let mark, _), .parser(let context, let problem, let mark, _),
      .composer(let context, let problem, let mark, _):
      text = "\(problem) at column \(mark.column)" + (context.map { " (\($0.text))" } ?? "")
    case .reader(let problem, let offset, _, _):
      text = problem + (offset.map { " at byte \($0)" } ?? "")
    case .duplicatedKeysInMapping(let duplicates, _):
      text = "duplicate keys: \(duplicates.joined(separator: ", "))"
    default:
      text = "\(self)"
    }
    return text.count > 300 ? String(text.prefix(300)) + "…" : text
  }
}
