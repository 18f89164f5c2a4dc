import Foundation

/// A size as people write it in thresholds: `0`, `512 B`, `64 KB`, `1.5 MiB`.
///
/// KB and MB are decimal (1000, 1000²), KiB and MiB binary (1024, 1024²), as the units say.
public struct ByteSize: Hashable, Sendable, CustomStringConvertible {
  public var bytes: Int

  public init(bytes: Int) { self.bytes = bytes }

  public static let acceptedForms =
    "a number followed by B, KB, MB, GB, KiB, MiB or GiB (e.g. 64KB, 1.5 MiB, 512 B; a bare 0 is allowed)"

  private static let units: [(String, Double)] = [
    ("GiB", 1024 * 1024 * 1024), ("MiB", 1024 * 1024), ("KiB", 1024),
    ("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1),
  ]

  /// - Returns: nil when `text` is not one of ``acceptedForms``, or names Int.max bytes or more.
  public init?(parsing text: String) {
    guard let magnitude = Self.magnitude(parsing: text), magnitude < Double(Int.max) else { return nil }
    bytes = Int(magnitude.rounded())
  }

  /// The bytes `text` names in one of ``acceptedForms``, however many: what tells a size too
  /// large for a limit from text that is no size.
  public static func magnitude(parsing text: String) -> Double? {
    let trimmed = text.trimmingCharacters(in: .whitespaces)
    if trimmed == "0" { return 0 }
    guard let (unit, factor) = units.first(where: { trimmed.hasSuffix($0.0) }) else { return nil }
    let number = trimmed.dropLast(unit.count).trimmingCharacters(in: .whitespaces)
    guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
      let value = Double(number), value.isFinite, value >= 0, (value * factor).isFinite
    else { return nil }
    return value * factor
  }

  /// `512 B`, `1.5 KiB`, `12.3 MiB`, `1.25 GiB`: how every report and message writes a size
  /// (a negative one, a shrink, with its sign).
  public var description: String {
    let value = Double(bytes)
    switch abs(value) {
    case ..<1024: return "\(bytes) B"
    case ..<(1024 * 1024): return String(format: "%.1f KiB", value / 1024)
    case ..<(1024 * 1024 * 1024): return String(format: "%.1f MiB", value / 1024 / 1024)
    default: return String(format: "%.2f GiB", value / 1024 / 1024 / 1024)
    }
  }
}
