/// Strings the recorded program controls (mark labels, step and thread names, paths,
/// arguments) on a terminal. A control character in them would be acted on, not shown: an
/// escape sequence can clear the screen or retitle the window, a carriage return overwrite
/// a line the harness printed, a newline forge one ("Checks: 0 failed"). They are shown as
/// escapes instead, as `ls -b` shows file names.
public enum TerminalText {
  /// `text` with every control character (C0, DEL, C1) written as an escape: `\n`, `\t`,
  /// `\r`, `\e`, or `\x7f` / `\u{9b}`; a backslash stays as it is.
  public static func inline(_ text: String) -> String {
    escaped(text, keepingNewlines: false)
  }

  /// A whole rendered text: control characters escaped, except the newlines that end its
  /// lines.
  public static func lines(_ text: String) -> String {
    escaped(text, keepingNewlines: true)
  }

  private static func escaped(_ text: String, keepingNewlines: Bool) -> String {
    guard text.unicodeScalars.contains(where: { isControl($0) && !(keepingNewlines && $0 == "\n") }) else {
      return text
    }
    var out = String.UnicodeScalarView()
    for scalar in text.unicodeScalars {
      guard isControl(scalar), !(keepingNewlines && scalar == "\n") else {
        out.append(scalar)
        continue
      }
      out.append(contentsOf: escape(scalar).unicodeScalars)
    }
    return String(out)
  }

  private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
    scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
  }

  private static func escape(_ scalar: Unicode.Scalar) -> String {
    switch scalar {
    case "\n": return "\\n"
    case "\t": return "\\t"
    case "\r": return "\\r"
    case "\u{1B}": return "\\e"
    default:
      let hex = String(scalar.value, radix: 16)
      return scalar.value < 0x80 ? "\\x" + String(repeating: "0", count: 2 - hex.count) + hex : "\\u{\(hex)}"
    }
  }
}
