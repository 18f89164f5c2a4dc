import Foundation

/// Shortens demangled Swift names the way Instruments shows them: argument labels instead
/// of argument types, no return types, no closure signatures.
///
/// `closure #1 (Swift.UnsafeBufferPointer<Swift.UInt8>) -> () in MyApp.Image.blurred() -> MyApp.Image`
/// becomes `closure #1 in MyApp.Image.blurred()`.
enum SymbolName {
  /// An async function's partial functions (`(1) await resume partial function for
  /// MyApp.load()`, `(2) suspend resume partial function for ...`) are the function, as
  /// Instruments and the Swift runtime's backtracer show them.
  static func withoutPartialFunction(_ demangled: String) -> String {
    guard demangled.hasPrefix("(") else { return demangled }
    return demangled.replacingOccurrences(
      of: #"^\(\d+\) (await|suspend) resume partial function for "#, with: "", options: .regularExpression)
  }

  static func simplified(_ demangled: String) -> String {
    let demangled = withoutPartialFunction(demangled)
    // Attributes of closure types (`@Swift.MainActor @Sendable`) say nothing about where
    // the time went.
    var text = demangled.replacingOccurrences(of: #"@[A-Za-z_][A-Za-z0-9_.]* "#, with: "", options: .regularExpression)
    text = text.replacingOccurrences(of: #"\) (async )?(throws )?-> "#, with: ") -> ", options: .regularExpression)
    // `variable initialization expression of static A.b : T`: the type of `b` is noise.
    if text.contains("variable initialization expression of") {
      text = text.replacingOccurrences(of: #" : [^ ]+$"#, with: "", options: .regularExpression)
    }
    let characters = Array(text)
    var output = ""
    var index = 0
    while index < characters.count {
      let character = characters[index]
      guard character == "(", let close = matchingParenthesis(characters, from: index) else {
        output.append(character)
        index += 1
        continue
      }
      let inside = String(characters[(index + 1)..<close])
      let isClosureSignature =
        output.hasSuffix(" ") && output.range(of: #"closure #\d+ $"#, options: .regularExpression) != nil
      if let privateName = privateDeclarationName(inside), output.hasSuffix(".") || output.isEmpty {
        // `(layout in _0123ABCD)`: a private declaration's discriminator.
        output += privateName
        index = close + 1
        continue
      }
      if isClosureSignature {
        output.removeLast()  // the space before the signature
      } else if output.isEmpty || output.hasSuffix(" ") || output.hasSuffix("<") || output.hasSuffix("(") {
        // A tuple or function type, not an argument list: keep it.
        output += "(" + inside + ")"
      } else {
        output += "(" + labels(of: inside) + ")"
      }
      index = close + 1
      index = skipReturnType(characters, from: index)
    }
    return output
  }

  private static func privateDeclarationName(_ inside: String) -> String? {
    let parts = inside.split(separator: " ")
    guard parts.count == 3, parts[1] == "in", parts[2].hasPrefix("_") else { return nil }
    return String(parts[0])
  }

  private static func matchingParenthesis(_ characters: [Character], from start: Int) -> Int? {
    var depth = 0
    for index in start..<characters.count {
      switch characters[index] {
      case "(", "<", "[": depth += 1
      case ")", ">", "]":
        // "->" is an arrow, not a closing bracket.
        if characters[index] == ">" && index > 0 && characters[index - 1] == "-" { continue }
        depth -= 1
        if depth == 0 { return characters[index] == ")" ? index : nil }
      default: continue
      }
    }
    return nil
  }

  /// `" -> T"` after an argument list runs to the next `" in "` at depth 0 or the end.
  private static func skipReturnType(_ characters: [Character], from start: Int) -> Int {
    let arrow: [Character] = [" ", "-", ">", " "]
    guard start + 4 <= characters.count, Array(characters[start..<(start + 4)]) == arrow else {
      return start
    }
    var depth = 0
    var index = start + 4
    while index < characters.count {
      let character = characters[index]
      if character == "(" || character == "<" || character == "[" { depth += 1 }
      if character == ")" || character == "]" || (character == ">" && characters[index - 1] != "-") { depth -= 1 }
      if depth == 0 && character == " " && index + 3 < characters.count
        && characters[index + 1] == "i" && characters[index + 2] == "n" && characters[index + 3] == " "
      {
        return index
      }
      if depth < 0 { return index }
      index += 1
    }
    return index
  }

  /// `decoding: Swift.Array<Swift.UInt8>, side: Swift.Int` → `decoding:side:`.
  private static func labels(of arguments: String) -> String {
    guard !arguments.isEmpty else { return "" }
    var parts: [String] = []
    var depth = 0
    var current = ""
    var previous: Character = " "
    for character in arguments {
      if character == "(" || character == "<" || character == "[" { depth += 1 }
      if character == ")" || character == "]" || (character == ">" && previous != "-") { depth -= 1 }
      if character == "," && depth == 0 {
        parts.append(current)
        current = ""
      } else {
        current.append(character)
      }
      previous = character
    }
    parts.append(current)
    return parts.map { part in
      let trimmed = part.drop { $0 == " " }
      if let colon = trimmed.firstIndex(of: ":"),
        trimmed[..<colon].allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" })
      {
        return String(trimmed[..<colon]) + ":"
      }
      return "_:"
    }.joined()
  }
}
