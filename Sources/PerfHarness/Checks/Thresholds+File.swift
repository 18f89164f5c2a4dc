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
  public static let fileKeys = [
    "max-growth-per-generation", "warm-up-generations", "max-leaked-bytes", "max-cycles", "max-persistent",
    "max-peak-heap", "min-coverage",
  ]

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
      func size() throws -> ByteSize {
        guard let text = value.scalar?.string, let size = ByteSize(parsing: text) else {
          throw fail("'\(value.scalar?.string ?? "…")' is not a size; accepted: \(ByteSize.acceptedForms)")
        }
        return size
      }
      func count() throws -> Int {
        guard let text = value.scalar?.string, let number = Int(text), number >= 0 else {
          throw fail("'\(value.scalar?.string ?? "…")' is not a count; accepted: a whole number, 0 or more")
        }
        return number
      }
      switch key {
      case "max-growth-per-generation": thresholds.maxGrowthPerGeneration = try size()
      case "warm-up-generations": thresholds.warmUpGenerations = try count()
      case "max-leaked-bytes": thresholds.maxLeakedBytes = try size()
      case "max-cycles": thresholds.maxCycles = try count()
      case "max-peak-heap": thresholds.maxPeakHeap = try size()
      case "min-coverage":
        guard let text = value.scalar?.string, let percent = Thresholds.percent(parsing: text) else {
          throw fail("'\(value.scalar?.string ?? "…")' is not a percentage; accepted: \(Thresholds.percentForms)")
        }
        thresholds.minCoveragePercent = percent
      case "max-persistent":
        guard let types = value.mapping else {
          throw fail("expected a mapping of type names to counts, e.g. 'MyApp.Screen: 1'")
        }
        for (typeNode, limitNode) in types {
          guard let type = typeNode.string, !type.isEmpty, let text = limitNode.scalar?.string,
            let limit = Int(text), limit >= 0
          else {
            throw ThresholdsFileError(
              path: path, line: typeNode.mark?.line,
              message: "max-persistent: expected 'TypeName: count' with a whole number, 0 or more")
          }
          thresholds.maxPersistent[type] = limit
        }
      default:
        throw fail("unknown key; accepted: \(fileKeys.joined(separator: ", "))")
      }
    }
    return thresholds
  }
}

extension Thresholds {
  public static let percentForms = "a number from 0 to 100, with or without '%' (e.g. 95, 97.5%)"

  /// "95", "97.5%": a percentage from 0 to 100.
  public static func percent(parsing text: String) -> Double? {
    var trimmed = text.trimmingCharacters(in: .whitespaces)
    if trimmed.hasSuffix("%") { trimmed = String(trimmed.dropLast()).trimmingCharacters(in: .whitespaces) }
    guard let value = Double(trimmed), value.isFinite, (0...100).contains(value) else { return nil }
    return value
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
