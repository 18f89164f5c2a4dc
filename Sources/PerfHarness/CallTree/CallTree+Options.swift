/// The Call Tree options of Instruments' Time Profiler (the popover under the detail panel).
public struct CallTreeOptions: Hashable, Sendable, Codable {
  /// A root per thread, the thread's tree beneath it. Off: all threads merge.
  public var separateByThread: Bool
  /// Stacks read leaf to root: the roots are the functions that were executing, their
  /// children the callers.
  public var invert: Bool
  /// Frames of system libraries are removed; their time goes to the nearest app caller.
  public var hideSystemLibraries: Bool
  /// Recursion (direct or mutual) shows as one entry per stack; see ``CallTree``.
  public var flattenRecursion: Bool
  /// Every function becomes a root with the time of the samples it appears in.
  public var topFunctions: Bool

  public init(
    separateByThread: Bool = false,
    invert: Bool = false,
    hideSystemLibraries: Bool = false,
    flattenRecursion: Bool = false,
    topFunctions: Bool = false
  ) {
    self.separateByThread = separateByThread
    self.invert = invert
    self.hideSystemLibraries = hideSystemLibraries
    self.flattenRecursion = flattenRecursion
    self.topFunctions = topFunctions
  }

  // Missing keys mean "off", so a hand-written `{"invert": true}` decodes.
  public init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: CodingKeys.self)
    separateByThread = try container.decodeIfPresent(Bool.self, forKey: .separateByThread) ?? false
    invert = try container.decodeIfPresent(Bool.self, forKey: .invert) ?? false
    hideSystemLibraries = try container.decodeIfPresent(Bool.self, forKey: .hideSystemLibraries) ?? false
    flattenRecursion = try container.decodeIfPresent(Bool.self, forKey: .flattenRecursion) ?? false
    topFunctions = try container.decodeIfPresent(Bool.self, forKey: .topFunctions) ?? false
  }

  /// The canonical option names ``init(parsing:)`` accepts.
  public static var optionNames: [String] { optionTable.map { $0.names[0] } }

  /// The names of the options that are on, in canonical form.
  public var enabledOptionNames: [String] {
    Self.optionTable.filter { self[keyPath: $0.keyPath] }.map { $0.names[0] }
  }

  // Computed, not stored: key paths are not Sendable, so they cannot live in a static let.
  private static var optionTable: [(names: [String], keyPath: WritableKeyPath<CallTreeOptions, Bool>)] {
    [
      (["separate-by-thread", "thread", "threads"], \.separateByThread),
      (["invert", "inverted"], \.invert),
      (["hide-system-libraries", "hide-system", "app-only"], \.hideSystemLibraries),
      (["flatten-recursion", "flatten"], \.flattenRecursion),
      (["top-functions", "top"], \.topFunctions),
    ]
  }

  /// Parses a comma-separated list such as `invert,hide-system-libraries` (`""` or `none`:
  /// every option off). Throws ``ParseError`` naming the bad word and the accepted forms.
  public init(parsing text: String) throws(ParseError) {
    self.init()
    for word in text.split(separator: ",") {
      let name = word.trimmingCharacters(in: " ").lowercased()
      if name.isEmpty || name == "none" { continue }
      guard let option = Self.optionTable.first(where: { $0.names.contains(name) }) else {
        throw ParseError(word: name)
      }
      self[keyPath: option.keyPath] = true
    }
  }

  /// An unknown word in a call tree options list.
  public struct ParseError: Error, CustomStringConvertible, Sendable {
    public var word: String
    public var description: String {
      let accepted = CallTreeOptions.optionNames.joined(separator: ", ")
      return "unknown call tree option '\(word)'; expected a comma-separated list of: \(accepted)"
    }
  }
}

extension Substring {
  fileprivate func trimmingCharacters(in character: Character) -> String {
    String(drop(while: { $0 == character }).reversed().drop(while: { $0 == character }).reversed())
  }
}
