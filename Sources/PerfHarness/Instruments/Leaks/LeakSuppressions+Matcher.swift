extension LeakSuppressions {
  /// Matches leaked blocks against every pattern at a cost that does not grow with the
  /// number of patterns: scanning them all, 11,485 patterns against 20,000 leaked blocks
  /// took 220 s inside the program's exit. Exact names are looked up in a hash set, literal
  /// prefixes (`Name*`) and suffixes (`*Name`) by binary search in sorted arrays; only the
  /// other globs (`?`, a `*` inside) are tried one by one. Same answers as
  /// ``LeakSuppressions/glob(_:matches:)`` applied to each pattern.
  public struct Matcher: Sendable {
    private let types: GlobSet
    private let stacks: GlobSet

    init(_ suppressions: LeakSuppressions) {
      types = GlobSet(suppressions.patterns.filter { $0.kind == .type }.map(\.glob))
      stacks = GlobSet(suppressions.patterns.filter { $0.kind == .stack }.map(\.glob))
    }

    /// Whether stack patterns exist: without them a block's stack need not be looked up.
    public var needsStacks: Bool { !stacks.isEmpty }

    /// Whether a block of `type` allocated at `stack` (symbols and modules) is suppressed.
    public func matches(type: String, stack: [AllocationsReport.StackFrame]) -> Bool {
      if types.matches(type) { return true }
      guard !stacks.isEmpty else { return false }
      return stack.contains { stacks.matches($0.symbol) || stacks.matches($0.module) }
    }
  }
}

/// Globs of one kind, indexed by their shape. Compared as UTF-8 bytes, which for literal
/// text is the same as comparing Unicode scalars (as `glob` does), and unlike `String`'s
/// `==`, which equates canonically equivalent spellings.
struct GlobSet: Sendable {
  private var matchesAll = false
  private var exact: Set<[UInt8]> = []
  private var prefixes = SortedPrefixes()
  /// Reversed, so a suffix is a prefix of the reversed text.
  private var suffixes = SortedPrefixes()
  private var others: [[Unicode.Scalar]] = []

  init(_ globs: [String]) {
    var prefixes: [[UInt8]] = []
    var suffixes: [[UInt8]] = []
    // By scalars, as `glob` reads them: a `*` with a combining mark after it is one
    // Character but still a wildcard.
    for glob in globs.map({ Array($0.unicodeScalars) }) {
      let leading = glob.prefix { $0 == "*" }.count
      let trailing = leading == glob.count ? 0 : glob.reversed().prefix { $0 == "*" }.count
      let literal = glob[leading..<(glob.count - trailing)]
      let bytes = literal.flatMap { Array(String($0).utf8) }
      if literal.contains("*") || literal.contains("?") || (leading > 0 && trailing > 0 && !literal.isEmpty) {
        others.append(glob)
      } else if literal.isEmpty && leading > 0 {
        matchesAll = true
      } else if leading == 0 && trailing == 0 {
        exact.insert(bytes)
      } else if leading == 0 {
        prefixes.append(bytes)
      } else {
        suffixes.append(bytes.reversed())
      }
    }
    self.prefixes = SortedPrefixes(prefixes)
    self.suffixes = SortedPrefixes(suffixes)
  }

  var isEmpty: Bool { !matchesAll && exact.isEmpty && prefixes.isEmpty && suffixes.isEmpty && others.isEmpty }

  func matches(_ text: String) -> Bool {
    if matchesAll { return true }
    let bytes = Array(text.utf8)
    if exact.contains(bytes) || prefixes.containsPrefix(of: bytes) { return true }
    if !suffixes.isEmpty && suffixes.containsPrefix(of: bytes.reversed()) { return true }
    guard !others.isEmpty else { return false }
    let scalars = Array(text.unicodeScalars)
    return others.contains { LeakSuppressions.glob($0, matches: scalars) }
  }
}

/// Byte strings sorted, to find whether one of them starts a given text in a few binary
/// searches whatever their number.
struct SortedPrefixes: Sendable {
  private var sorted: [[UInt8]] = []

  init(_ strings: [[UInt8]] = []) {
    sorted = Array(Set(strings)).sorted { $0.lexicographicallyPrecedes($1) }
  }

  var isEmpty: Bool { sorted.isEmpty }

  /// A prefix of `text` in the set is at most the greatest element not after `text`, and
  /// starts that element too (everything between a prefix and `text` starts with it); so
  /// either that element is the prefix, or the answer lies within what it shares with
  /// `text`, a strictly shorter text to search again.
  func containsPrefix(of text: [UInt8]) -> Bool {
    var length = text.count
    while let candidate = greatest(notAfter: text[..<length]) {
      let common = zip(candidate, text[..<length]).prefix { $0 == $1 }.count
      if common == candidate.count { return true }
      length = common
    }
    return false
  }

  private func greatest(notAfter key: ArraySlice<UInt8>) -> [UInt8]? {
    var low = 0
    var high = sorted.count
    while low < high {
      let middle = (low + high) / 2
      if key.lexicographicallyPrecedes(sorted[middle]) { high = middle } else { low = middle + 1 }
    }
    return low > 0 ? sorted[low - 1] : nil
  }
}
