/// Leak suppressions, LSan-style: one pattern per line, `type:<glob>` matches a leaked
/// block's type name, `stack:<glob>` any symbol or module of its allocation stack. Globs
/// use `*` (any run of characters) and `?` (one character); a pattern without `*` at
/// either end must match the whole name. `#` starts a comment; blank lines are ignored.
///
/// A suppressed leaked block is treated as a root: it and everything only it keeps alive
/// leave the report (counted in `suppressedCount` / `suppressedBytes`).
public struct LeakSuppressions: Sendable, Equatable, Codable {
  public enum Kind: String, Sendable, Equatable, Codable {
    case type
    case stack
  }

  public struct Pattern: Sendable, Equatable, Codable {
    public var kind: Kind
    public var glob: String
    /// 1-based line in the source text.
    public var line: Int
  }

  public struct ParseError: Error, CustomStringConvertible, Equatable {
    public var line: Int
    public var message: String
    public var description: String { "suppressions line \(line): \(message)" }
  }

  public var patterns: [Pattern]

  public static let none = LeakSuppressions(patterns: [])

  /// Always applied: blocks of the runtime and system libraries that are alive through
  /// references a scan of the process's memory cannot see. Measured on Swift 6.3 with every
  /// block tracked from process start, each by a search of all writable memory for a word
  /// pointing into it:
  /// - the Swift runtime's metadata and witness-table cache storage: no such word exists;
  ///   the runtime keeps it for the process's life and no program can free it;
  /// - a thread's dynamic TLS vector (`allocate_dtv`): referenced from the thread control
  ///   block, which for an exited thread lies in glibc's cache of stacks, not in a thread;
  /// - Dispatch sources (`dispatch_source_create`, e.g. RunLoop's timers): registered with
  ///   epoll, so the pointer that keeps them alive is in the kernel (not searched: this
  ///   one follows from how Dispatch works).
  /// Needs allocation stacks: with `--no-allocation-stacks` they are reported.
  public static let systemLibraries = LeakSuppressions(patterns: [
    Pattern(kind: .stack, glob: "*swift::ConcurrentReadableHashMap<*", line: 0),
    Pattern(kind: .stack, glob: "*swift::LockingConcurrentMap<*", line: 0),
    Pattern(kind: .stack, glob: "swift_getWitnessTable", line: 0),
    Pattern(kind: .stack, glob: "allocate_dtv", line: 0),
    Pattern(kind: .stack, glob: "dispatch_source_create", line: 0),
  ])

  public init(patterns: [Pattern]) {
    self.patterns = patterns
  }

  /// Parses the text of a suppressions file.
  public init(parsing text: String) throws(ParseError) {
    var patterns: [Pattern] = []
    for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
      var line = Substring(rawLine)
      if let hash = line.firstIndex(of: "#") { line = line[..<hash] }
      let trimmed = line.drop { $0 == " " || $0 == "\t" || $0 == "\r" }
      let content = String(trimmed.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed())
      if content.isEmpty { continue }
      guard let colon = content.firstIndex(of: ":") else {
        throw ParseError(
          line: index + 1, message: "expected `type:<glob>` or `stack:<glob>`, found \"\(content)\"")
      }
      let keyword = String(content[..<colon])
      let glob = String(content[content.index(after: colon)...])
      guard let kind = Kind(rawValue: keyword) else {
        throw ParseError(
          line: index + 1, message: "unknown kind \"\(keyword)\"; accepted: type, stack")
      }
      guard !glob.isEmpty else {
        throw ParseError(line: index + 1, message: "empty pattern after \"\(keyword):\"")
      }
      patterns.append(Pattern(kind: kind, glob: glob, line: index + 1))
    }
    self.patterns = patterns
  }

  public var isEmpty: Bool { patterns.isEmpty }

  /// The patterns compiled for matching many blocks: build it once per analysis.
  public func matcher() -> Matcher { Matcher(self) }

  /// `*` and `?` glob match over Unicode scalars (iterative, with backtracking to the last `*`).
  public static func glob(_ pattern: String, matches text: String) -> Bool {
    glob(Array(pattern.unicodeScalars), matches: Array(text.unicodeScalars))
  }

  static func glob(_ p: [Unicode.Scalar], matches t: [Unicode.Scalar]) -> Bool {
    var pi = 0
    var ti = 0
    var star = -1
    var mark = 0
    while ti < t.count {
      // The star first: taken as a literal, a `*` in the pattern matched a `*` in the name
      // (`foo(char*)`) with no way back, and `*` did not match `*Cache`.
      if pi < p.count, p[pi] == "*" {
        star = pi
        mark = ti
        pi += 1
      } else if pi < p.count, p[pi] == "?" || p[pi] == t[ti] {
        pi += 1
        ti += 1
      } else if star >= 0 {
        pi = star + 1
        mark += 1
        ti = mark
      } else {
        return false
      }
    }
    while pi < p.count, p[pi] == "*" { pi += 1 }
    return pi == p.count
  }
}
