import ArgumentParser

/// "Did you mean" for a mistyped name: a scenario, a subcommand, an enumerated value.
/// ArgumentParser suggests the nearest option name (its edit distance is internal to it) but
/// nothing for arguments or values; this is the same idea for those.
enum Suggestion {
  /// The accepted forms nearest to `input`, nearest first: those within a third of its length
  /// in edits (at least one), a swap of two neighbouring letters counting as one edit
  /// (`reprot`), case ignored. Several only when they are equally near.
  static func nearest(to input: String, among candidates: [String]) -> [String] {
    // A third of the length: `leak` → `leaks` and `reprot` → `report` are suggested, `cpu` →
    // `time` or `xml` → `text` (every letter different) are not.
    let allowed = max(1, input.count / 3)
    let scored = candidates.map { (candidate: $0, distance: editDistance(input.lowercased(), $0.lowercased())) }
      .filter { $0.distance <= allowed && $0.candidate != input }
    guard let best = scored.map(\.distance).min() else { return [] }
    return scored.filter { $0.distance == best }.map(\.candidate)
  }

  /// `"did you mean 'leaks'? "` (or `'a' or 'b'`), or `""` when nothing is near: to be put
  /// between what was wrong and the accepted forms.
  static func didYouMean(_ input: String, among candidates: [String]) -> String {
    let nearest = nearest(to: input, among: candidates)
    guard !nearest.isEmpty else { return "" }
    return "did you mean " + nearest.map { "'\($0)'" }.joined(separator: " or ") + "? "
  }

  /// Parses one of an enumeration's raw values (an option's `transform`). ArgumentParser's
  /// own message for an `ExpressibleByArgument` enumeration lists the values but suggests
  /// none; its help then loses the `(values: …; default: …)` line, so the option's help
  /// names them itself.
  static func value<Value: RawRepresentable & CaseIterable & Sendable>(
    of _: Value.Type
  ) -> @Sendable (String) throws -> Value where Value.RawValue == String {
    // Looked up in a table made here: the closure may not capture the (non-Sendable) metatype.
    let values = Value.allCases.map { (name: $0.rawValue, value: $0) }
    return { text in
      if let match = values.first(where: { $0.name == text }) { return match.value }
      let accepted = values.map(\.name)
      throw ValidationError(didYouMean(text, among: accepted) + "accepted: " + accepted.joined(separator: ", "))
    }
  }

  /// Optimal string alignment distance: insertions, deletions, substitutions and swaps of
  /// neighbouring characters, one edit each.
  static func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a)
    let b = Array(b)
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var previousRow: [Int] = []
    var row = Array(0...b.count)
    for i in 1...a.count {
      let beforePrevious = previousRow
      previousRow = row
      row = [i] + Array(repeating: 0, count: b.count)
      for j in 1...b.count {
        let substitution = previousRow[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
        row[j] = min(previousRow[j] + 1, row[j - 1] + 1, substitution)
        if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
          row[j] = min(row[j], beforePrevious[j - 2] + 1)
        }
      }
    }
    return row[b.count]
  }
}
