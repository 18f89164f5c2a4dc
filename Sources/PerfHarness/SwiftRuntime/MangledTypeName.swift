/// A mangled type name as the compiler emits it into an image's reflection data, read in
/// place: symbolic references in it are relative to where its bytes lie.
struct MangledTypeName {
  let bytes: UnsafePointer<UInt8>
  /// Bytes up to the terminating zero.
  let length: Int

  /// nil when no terminating zero comes within 4 KiB (not a name the compiler wrote).
  init?(_ bytes: UnsafePointer<UInt8>) {
    self.bytes = bytes
    var index = 0
    while index < 4096 {
      let byte = bytes[index]
      if byte == 0 {
        length = index
        return
      }
      index += Self.symbolicReferenceSize(byte) ?? 1
    }
    return nil
  }

  /// A symbolic reference's size (0x01-0x17 take 4 more bytes, 0x18-0x1F take 8): it may
  /// hold zero bytes, so a name is not its C string.
  static func symbolicReferenceSize(_ byte: UInt8) -> Int? {
    byte == 0 ? nil : byte <= 0x17 ? 5 : byte <= 0x1F ? 9 : nil
  }

  /// Whether the name may mention a generic parameter, an associated type of one, an
  /// opaque type or a pack: names the runtime can resolve only with the generic context
  /// they were written in. Asked without it, the runtime does not fail softly: it aborts
  /// the process ("Expected a metadata pack but got metadata" for a capture of type
  /// `(Request, Self.Context) async throws -> Output`). So a caller that has no context
  /// asks this first, and an answer of true only costs a name.
  ///
  /// Identifiers and symbolic references are skipped by the mangling's grammar, so a
  /// type named `Xylophone` is not a generic parameter; every other `x`, `q` or `Q` is
  /// taken as one. Operators whose second character is a letter argument (`S`, `X`, and
  /// the substitutions after `A`) are skipped whole, so `Sq` (Optional) is not one either.
  var mayNeedGenericContext: Bool {
    var index = 0
    while index < length {
      let byte = bytes[index]
      if let size = Self.symbolicReferenceSize(byte) {
        index += size
        continue
      }
      switch byte {
      case UInt8(ascii: "0")...UInt8(ascii: "9"):
        guard let end = identifierEnd(from: index) else { return true }
        index = end
      case UInt8(ascii: "x"), UInt8(ascii: "q"), UInt8(ascii: "Q"):
        return true
      case UInt8(ascii: "S"):
        index = standardSubstitutionEnd(from: index + 1)
      case UInt8(ascii: "I"):
        // A function type's conventions up to `_`: letters of their own (`x` is "owned").
        index = end(of: UInt8(ascii: "_"), from: index + 1)
      case UInt8(ascii: "X"):
        index += 2
      case UInt8(ascii: "A"):
        index = substitutionEnd(from: index + 1)
      default:
        index += 1
      }
    }
    return false
  }

  /// The end of the identifier starting at `start` (a digit): `N chars`, or after `0` the
  /// word-substituted form (lower-case words go on, an upper-case one or `0` ends it,
  /// `N chars` parts in between), or after `00` a punycoded `N chars`. nil when it runs
  /// past the name: not a form this reads.
  private func identifierEnd(from start: Int) -> Int? {
    var index = start
    var wordSubstitutions = false
    if bytes[index] == UInt8(ascii: "0") {
      index += 1
      guard index < length else { return nil }
      if bytes[index] == UInt8(ascii: "0") {
        index += 1
      } else {
        wordSubstitutions = true
      }
    }
    repeat {
      while wordSubstitutions, index < length, Self.isLetter(bytes[index]) {
        if Self.isUpper(bytes[index]) { wordSubstitutions = false }
        index += 1
      }
      guard index < length else { return wordSubstitutions ? nil : index }
      if bytes[index] == UInt8(ascii: "0") { return index + 1 }
      guard let (count, afterCount) = natural(from: index), count > 0 else {
        return wordSubstitutions ? nil : index
      }
      index = afterCount + count
      guard index <= length else { return nil }
    } while wordSubstitutions
    return index
  }

  /// `A` then `N_`/`_` (one earlier node) or lower-case letters closed by an upper-case one.
  private func substitutionEnd(from start: Int) -> Int {
    var index = start
    while index < length {
      let byte = bytes[index]
      index += 1
      if byte == UInt8(ascii: "_") || Self.isUpper(byte) { break }
    }
    return index
  }

  /// `S`, an optional repeat count, then one letter, or `c` and one letter for concurrency's
  /// standard types.
  private func standardSubstitutionEnd(from start: Int) -> Int {
    var index = natural(from: start)?.1 ?? start
    if index < length, bytes[index] == UInt8(ascii: "c") { index += 1 }
    return min(index + 1, length)
  }

  private func end(of terminator: UInt8, from start: Int) -> Int {
    var index = start
    while index < length, bytes[index] != terminator { index += 1 }
    return min(index + 1, length)
  }

  private func natural(from start: Int) -> (Int, Int)? {
    var index = start
    var value = 0
    while index < length, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
      value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
      guard value < 1 << 20 else { return nil }
      index += 1
    }
    return index == start ? nil : (value, index)
  }

  private static func isUpper(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") }
  private static func isLetter(_ byte: UInt8) -> Bool {
    isUpper(byte) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
  }
}
