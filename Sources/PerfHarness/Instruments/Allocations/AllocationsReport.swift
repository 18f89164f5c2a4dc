/// The Allocations instrument's results (the JSON report's `allocations` section).
///
/// Generations: generation 0 ("Start") runs from the start of recording to the first
/// mark; generation n (n >= 1) runs from the n-th mark to the next one, the last one to
/// the end of recording, and carries the n-th mark's label. A mark therefore *opens* a
/// generation: mark before the action you want to measure. `liveBytes` is the tracked
/// live heap when the generation's opening mark was taken (0 for "Start").
public struct AllocationsReport: Codable, Sendable, Equatable {
  /// "countsOnly" or "fullStacks".
  public var mode: String
  public var durationMilliseconds: Double
  public var totals: Totals
  /// Sorted by persistent bytes, largest first.
  public var categories: [Category]
  public var generations: [Generation]
  /// Live heap over time, sampled at most once per millisecond of allocation activity.
  public var timeline: [TimelinePoint]
  /// Anything that did not fit: non-zero counts mean the numbers above are incomplete.
  public var lost: Lost
  /// What recording cost in memory.
  public var overhead: Overhead
  /// What was still live at the end by allocation stack, heaviest first (at most
  /// `AllocationsAnalysis.persistentStackLimit`): the allocation flame graph's and the
  /// exports' input. Nil when recorded without stacks.
  public var persistentStacks: [PersistentStack]? = nil
  /// The frames `persistentStacks` and `totalStacks` index into, each once.
  public var stackFrames: [StackFrame]? = nil
  /// Everything allocated while recording (freed or not) by allocation stack, heaviest
  /// first (at most `AllocationsAnalysis.persistentStackLimit`): the total-bytes and
  /// count views and pprof's alloc_objects/alloc_space. Nil when recorded without stacks
  /// (and in reports written before the key).
  public var totalStacks: [TotalStack]? = nil

  /// One allocation stack's allocations over the whole recording.
  public struct TotalStack: Codable, Sendable, Equatable {
    public var count: Int
    public var bytes: Int
    /// Indices into `stackFrames`, leaf first.
    public var frames: [Int]
  }

  public struct PersistentStack: Codable, Sendable, Equatable {
    public var count: Int
    public var bytes: Int
    /// The category most of the bytes belong to.
    public var category: String
    /// Indices into `stackFrames`, leaf first.
    public var frames: [Int]
  }

  /// A persistent stack's frames, leaf first.
  public func frames(of stack: PersistentStack) -> [StackFrame] {
    frames(at: stack.frames)
  }

  /// Frames by their indices into `stackFrames`, leaf first.
  public func frames(at indices: [Int]) -> [StackFrame] {
    let table = stackFrames ?? []
    return indices.compactMap { table.indices.contains($0) ? table[$0] : nil }
  }

  public struct Totals: Codable, Sendable, Equatable {
    public var totalAllocations: Int
    public var totalBytes: Int
    public var persistentCount: Int
    public var persistentBytes: Int
    public var transientCount: Int
    public var transientBytes: Int
    public var peakLiveBytes: Int
    public var liveBytesAtEnd: Int
  }

  public struct Category: Codable, Sendable, Equatable {
    /// Module-qualified Swift type, "closure context (captures: A, B)" (or "closure
    /// context" when its captures cannot be read), "Swift box", or "Malloc <size class>"
    /// (power-of-two classes named by their upper bound).
    public var name: String
    /// "swiftClass", "closureContext", "swiftBox", "unknownSwiftObject", "malloc".
    public var kind: String
    /// A class of the profiled program itself (not of a library, the runtime or the
    /// harness); nil in reports written before this key existed.
    public var isApp: Bool?
    /// Allocated while recording and still live at its end.
    public var persistentCount: Int
    /// Allocated and freed while recording.
    public var transientCount: Int
    public var totalCount: Int
    public var persistentBytes: Int
    public var totalBytes: Int
  }

  public struct Generation: Codable, Sendable, Equatable {
    public var index: Int
    public var label: String
    public var startMilliseconds: Double
    public var endMilliseconds: Double
    /// Bytes and blocks allocated in this generation and still live at the end.
    public var growthBytes: Int
    public var growthCount: Int
    /// Tracked live heap when this generation's mark was taken.
    public var liveBytes: Int
    /// The heaviest growth categories, largest first.
    public var categories: [GrowthCategory]
  }

  public struct GrowthCategory: Codable, Sendable, Equatable {
    public var name: String
    public var growthBytes: Int
    public var growthCount: Int
    /// The stack that allocated most of this category's growth in this generation,
    /// leaf first; empty when recorded without stacks.
    public var allocationStack: [StackFrame]
  }

  public struct StackFrame: Codable, Sendable, Hashable {
    public var symbol: String
    public var module: String
    public var file: String?
    public var line: Int?
    public var isApp: Bool

    public init(symbol: String, module: String, file: String? = nil, line: Int? = nil, isApp: Bool) {
      self.symbol = symbol
      self.module = module
      self.file = file
      self.line = line
      self.isApp = isApp
    }
  }

  public struct TimelinePoint: Codable, Sendable, Equatable {
    public var timeMilliseconds: Double
    public var liveBytes: Int
  }

  public struct Lost: Codable, Sendable, Equatable {
    /// Allocations that could not be tracked at all.
    public var blocks: Int
    /// Allocations recorded without their stack (stack table full).
    public var stacks: Int
    /// Frees counted under "Malloc (uncategorized)" (category table full).
    public var freedCategories: Int
    public var timelinePoints: Int
    /// Allocations left out of `totalStacks` (the table of totals by stack was full).
    public var stackTotals: Int? = nil
    /// Marks that opened no generation (past `CPerfAlloc_MaxMarks`, 65,535): the
    /// allocations after them count in the last generation opened. Absent in reports
    /// written before the key.
    public var marks: Int? = nil
  }

  public struct Overhead: Codable, Sendable, Equatable {
    public var blockTableBytes: Int
    public var stackTableBytes: Int
    /// blockTableBytes / live blocks at the end (0 when nothing is live).
    public var bytesPerLiveBlock: Double
  }

  /// The categories whose name contains `text`, case-insensitively (like the filter
  /// field under Instruments' detail panel). An empty filter keeps everything.
  public func categories(matching text: String) -> [Category] {
    let needle = text.lowercased()
    if needle.isEmpty { return categories }
    return categories.filter { $0.name.lowercased().contains(needle) }
  }

  /// The category with exactly this name, if any.
  public func category(named name: String) -> Category? {
    categories.first { $0.name == name }
  }

  /// The category with this name and those that only add parentheses to it: "closure
  /// context" stands for every "closure context (captures: …)". A name without its module
  /// matches the module-qualified one by its suffix: "LeakyNode" is "MyApp.LeakyNode".
  public func categories(under name: String) -> [Category] {
    categories.filter { category in
      let base = Self.withoutParentheses(category.name)
      return base == name || base.hasSuffix("." + name)
    }
  }

  /// Up to three category names close to `name` (by their unqualified names), for a limit
  /// that matched nothing.
  public func namesResembling(_ name: String) -> [String] {
    let wanted = Self.unqualified(name).lowercased()
    let scored = Set(categories.filter { $0.kind != "malloc" }.map { Self.withoutParentheses($0.name) })
      .compactMap { candidate -> (String, Int)? in
        let short = Self.unqualified(candidate).lowercased()
        if short.contains(wanted) || wanted.contains(short) { return (candidate, 0) }
        let distance = editDistance(short, wanted)
        return distance <= max(2, wanted.count / 3) ? (candidate, distance) : nil
      }
    return scored.sorted { ($0.1, $0.0) < ($1.1, $1.0) }.prefix(3).map(\.0)
  }

  private static func withoutParentheses(_ name: String) -> String {
    guard let open = name.range(of: " (") else { return name }
    return String(name[..<open.lowerBound])
  }

  /// The last dot-separated component outside generic brackets.
  private static func unqualified(_ name: String) -> String {
    var depth = 0
    var start = name.startIndex
    for index in name.indices {
      switch name[index] {
      case "<": depth += 1
      case ">": depth -= 1
      case "." where depth == 0: start = name.index(after: index)
      default: break
      }
    }
    return String(name[start...])
  }
}

private func editDistance(_ a: String, _ b: String) -> Int {
  let a = Array(a)
  let b = Array(b)
  if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
  var previous = Array(0...b.count)
  for i in 1...a.count {
    var current = [i] + Array(repeating: 0, count: b.count)
    for j in 1...b.count {
      current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
    }
    previous = current
  }
  return previous[b.count]
}

extension [AllocationsReport.StackFrame] {
  /// Where the program itself made the allocation: the first frame of its own code (the
  /// Hide System Libraries rule), as `symbol (file:line)`; nil without a stack or without
  /// a frame of the program's code in it. An initializer the compiler made (no line) is
  /// passed over for its caller, which is the line a reader can change.
  public var programSite: String? {
    guard let frame = first(where: { $0.isApp && $0.line != nil }) ?? first(where: \.isApp) else { return nil }
    guard let file = frame.file else { return frame.symbol }
    let name = file.split(separator: "/").last.map(String.init) ?? file
    return "\(frame.symbol) (\(name)\(frame.line.map { ":\($0)" } ?? ""))"
  }
}
