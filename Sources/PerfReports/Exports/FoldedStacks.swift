import PerfHarness

/// Brendan Gregg's folded stack format, the input of `flamegraph.pl` and most flame graph
/// tools: one line per distinct stack, `root;caller;leaf <count>`.
public enum FoldedStacks {
  /// What the count at the end of each line measures.
  public enum Count: Sendable, Hashable {
    /// The stack's weight in milliseconds, rounded to an integer; a stack that has time but
    /// rounds to 0 is written as 1, so no sampled stack disappears from the graph.
    case milliseconds
    /// The number of samples with that stack, ignoring weights.
    case samples
  }

  /// Renders `profile` with `options` applied: Hide System Libraries and Flatten Recursion
  /// shape the stacks, Separate by Thread makes the thread name the first frame, Invert Call
  /// Tree writes stacks leaf first (an icicle graph). Top Functions has no folded form and is
  /// ignored. Frames are function names; lines are sorted, so output is deterministic.
  /// `;` in a name becomes `,` and line breaks become spaces, since those delimit the format.
  public static func render(
    _ profile: Profile, options: CallTreeOptions = .init(), count: Count = .milliseconds
  ) -> String {
    let stacks = profile.functionStacks(options: options)
    let labels = stacks.functions.map { escape($0.name) }
    // Different threads (and functions of the same name in different modules) can produce the
    // same text, so merge by text.
    var totals: [String: (weight: Double, samples: Int)] = [:]
    for stack in stacks.stacks {
      var frames = stack.functions.map { labels[$0] }
      if options.separateByThread {
        let thread =
          profile.threads.indices.contains(stack.thread)
          ? profile.threads[stack.thread].name : "Thread \(stack.thread)"
        frames.insert(escape(thread), at: 0)
      }
      totals[frames.joined(separator: ";"), default: (0, 0)].weight += stack.weight
      totals[frames.joined(separator: ";"), default: (0, 0)].samples += stack.sampleCount
    }
    var output = ""
    for (line, total) in totals.sorted(by: { $0.key < $1.key }) {
      let value: Int
      switch count {
      case .samples:
        value = total.samples
      case .milliseconds:
        guard total.weight > 0, total.weight.isFinite else { continue }
        value = max(1, Int(total.weight.rounded()))
      }
      guard value > 0 else { continue }
      output += "\(line) \(value)\n"
    }
    return output
  }

  static func escape(_ name: String) -> String {
    var result = ""
    result.reserveCapacity(name.utf8.count)
    for character in name {
      switch character {
      case ";": result.append(",")
      case "\n", "\r", "\r\n": result.append(" ")
      default: result.append(character)
      }
    }
    return result.isEmpty ? "<unnamed>" : result
  }
}

/// What was still live at the end of a run, by allocation stack, in the folded format:
/// `root;caller;allocating function <bytes>` (a memory flame graph with flamegraph.pl
/// `--countname=bytes`, or speedscope).
public enum AllocationsFolded {
  /// - Parameter hideSystemLibraries: keep only the program's own frames (a stack with none
  ///   keeps its frames), as Hide System Libraries does.
  public static func render(_ allocations: AllocationsReport, hideSystemLibraries: Bool = false) -> String {
    var totals: [String: Int] = [:]
    for stack in allocations.persistentStacks ?? [] {
      var frames = Array(allocations.frames(of: stack).reversed())
      if hideSystemLibraries, frames.contains(where: \.isApp) { frames = frames.filter(\.isApp) }
      // The category is the last frame: what the bytes are.
      let line = (frames.map { FoldedStacks.escape($0.symbol) } + [FoldedStacks.escape("[\(stack.category)]")])
        .joined(separator: ";")
      totals[line, default: 0] += stack.bytes
    }
    return totals.sorted { $0.key < $1.key }.filter { $0.value > 0 }.map { "\($0.key) \($0.value)\n" }.joined()
  }
}
