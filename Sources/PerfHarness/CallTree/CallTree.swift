/// One row of a call tree.
public struct CallTreeNode: Sendable, Codable, Hashable {
  /// What a row stands for.
  public enum Kind: String, Sendable, Codable, Hashable {
    /// A function (or one of the pseudo functions `<system libraries>`, `<unknown>`).
    case function
    /// A thread's root under Separate by Thread; `name` is the thread's name.
    case thread
  }

  public var kind: Kind
  /// The demangled function name, or the thread name for a thread row.
  public var name: String
  /// The module or image; `""` for thread rows and pseudo functions.
  public var module: String
  public var isApp: Bool
  /// A representative file of the function (its first frame seen).
  public var file: String?
  /// A representative line of the function (its first frame seen).
  public var line: Int?
  /// Milliseconds of samples whose leaf (executing) frame is this row. In an inverted tree
  /// that is a root's whole weight and zero below it, as in Instruments.
  public var selfWeight: Double
  /// Milliseconds of the samples passing through this row.
  public var totalWeight: Double
  /// How many samples pass through this row.
  public var sampleCount: Int
  /// Callees (callers when inverted), heaviest first; ties by name, then module.
  public var children: [CallTreeNode]

  public init(
    kind: Kind = .function, name: String, module: String, isApp: Bool, file: String? = nil,
    line: Int? = nil, selfWeight: Double, totalWeight: Double, sampleCount: Int,
    children: [CallTreeNode] = []
  ) {
    self.kind = kind
    self.name = name
    self.module = module
    self.isApp = isApp
    self.file = file
    self.line = line
    self.selfWeight = selfWeight
    self.totalWeight = totalWeight
    self.sampleCount = sampleCount
    self.children = children
  }
}

/// Instruments' Call Tree over a ``Profile``, at function granularity (frames with the same
/// name and module merge, whatever their line).
///
/// Semantics of the options, applied to each sample in this order:
/// 1. Hide System Libraries drops every non-app frame; the deepest remaining app frame becomes
///    the leaf and gets the self time. A sample with no app frame becomes the single pseudo
///    function `<system libraries>`.
/// 2. Flatten Recursion drops immediate repeats: walking root to leaf, whenever the stack ends
///    with a block of frames repeated back to back, the second copy goes (A→B→B→B→C ⇒ A→B→C,
///    A→B→A→B→C ⇒ A→B→C), until none is left. A function reached again through other work
///    stays (A→B→C→B→D is unchanged), so no function vanishes from a stack: Top Functions
///    numbers and self times are the same flattened or not, and no node has a child of its own
///    function.
/// 3. Invert Call Tree reverses the stack: roots are executing functions, children callers.
///    Self weight sits on the roots only (the leaf frame), as Instruments shows it.
/// 4. Top Functions makes every function a root: total = weight of the samples it appears in
///    (once per sample, however often it recurses), self = weight of the samples where it is
///    the leaf. Beneath each root is the ordinary tree from the function's first occurrence in
///    the (possibly inverted) stack: callees from its outermost call, or, inverted, callers from
///    its innermost call.
/// 5. Separate by Thread puts a ``CallTreeNode/Kind/thread`` row per thread (heaviest first)
///    above the thread's tree; its self weight is 0.
///
/// Invariants: without Top Functions the roots' totals add up to ``totalWeight``; a node's
/// total is its self plus its children's totals (inverted: a root's self equals its total and
/// a node's total is at least its children's). With Top Functions the roots' selfs add up to
/// ``totalWeight`` and each root's total is at most it. Under a thread row the same hold with
/// the thread's weight.
public struct CallTree: Sendable, Codable {
  public var options: CallTreeOptions
  /// Milliseconds of all samples considered (after the thread filter).
  public var totalWeight: Double
  /// Number of samples considered.
  public var sampleCount: Int
  public var roots: [CallTreeNode]

  public init(options: CallTreeOptions, totalWeight: Double, sampleCount: Int, roots: [CallTreeNode]) {
    self.options = options
    self.totalWeight = totalWeight
    self.sampleCount = sampleCount
    self.roots = roots
  }

  /// Builds the tree of `profile`'s samples on `threads` (indices into
  /// ``Profile/threads``; all when `nil`).
  ///
  /// With `pruning`, only the rows a view cut there can show are built: the children of a
  /// row lighter than its minimum weight, or at its depth, are left out, though the row
  /// itself is built with its weights. A million-sample profile has millions of rows and a
  /// printed summary shows a few dozen of them.
  public init(profile: Profile, options: CallTreeOptions, threads: Set<Int>? = nil, pruning: CallTreePruning? = nil) {
    var transformer = StackTransformer(profile: profile, options: options)
    var path: [Int32] = []
    var tries: [CallTrie] = []
    // Per thread index when separating, otherwise everything in tries[0].
    var trieOfThread: [Int: Int] = [:]
    var threadOfTrie: [Int] = []
    if !options.separateByThread { tries.append(CallTrie()) }
    var total = 0.0
    var count = 0
    for sample in profile.samples where threads?.contains(sample.thread) ?? true {
      transformer.transform(sample.stack, into: &path)
      var slot = 0
      if options.separateByThread {
        if let existing = trieOfThread[sample.thread] {
          slot = existing
        } else {
          slot = tries.count
          trieOfThread[sample.thread] = slot
          threadOfTrie.append(sample.thread)
          tries.append(CallTrie())
        }
      }
      tries[slot].insert(path, weight: sample.weight, samples: sample.sampleCount)
      total += sample.weight
      count += sample.sampleCount
    }

    let functions = transformer.functions
    // Under Separate by Thread the functions' rows start one level down.
    let depth = options.separateByThread ? 1 : 0
    let cut = pruning.map { CallTrie.Cut(minimumWeight: $0.minimumWeight(of: total), maxDepth: $0.maxDepth) }
    func rows(_ trie: CallTrie) -> [CallTreeNode] {
      options.topFunctions
        ? trie.topFunctionNodes(functions: functions, inverted: options.invert, cut: cut, depth: depth)
        : trie.nodes(functions: functions, inverted: options.invert, cut: cut, depth: depth)
    }
    var roots: [CallTreeNode]
    if options.separateByThread {
      // Names no longer carry the thread ID; threads that share one (Dispatch workers) are
      // told apart by it here, as Instruments shows them.
      let nameCounts = Dictionary(profile.threads.map { ($0.name, 1) }, uniquingKeysWith: +)
      roots = zip(threadOfTrie, tries).map { thread, trie in
        var name = profile.threads.indices.contains(thread) ? profile.threads[thread].name : "Thread \(thread)"
        if profile.threads.indices.contains(thread), nameCounts[name, default: 0] > 1 {
          name += " \(profile.threads[thread].threadID)"
        }
        return CallTreeNode(
          kind: .thread, name: name, module: "", isApp: false, selfWeight: 0,
          totalWeight: trie.totalWeight, sampleCount: trie.sampleCount, children: rows(trie))
      }
      roots.sort(by: CallTreeNode.heavierFirst)
    } else {
      roots = tries.first.map(rows) ?? []
    }
    self.init(options: options, totalWeight: total, sampleCount: count, roots: roots)
  }
}

/// Where a view of a ``CallTree`` stops, so that a build need not make what it would not
/// show: rows under `minimumFraction` of the tree's total weight show no children, nor do
/// rows at `maxDepth` (roots are at depth 0, so a row at depth `maxDepth - 1` shows whether
/// it has children and no more).
public struct CallTreePruning: Sendable, Hashable {
  public var minimumFraction: Double
  public var maxDepth: Int

  public init(minimumFraction: Double, maxDepth: Int) {
    self.minimumFraction = minimumFraction
    self.maxDepth = maxDepth
  }

  /// In milliseconds for a tree of `total`, a shade under the exact product so that a row
  /// whose share rounds onto the limit is kept whole (keeping more changes nothing shown).
  func minimumWeight(of total: Double) -> Double { minimumFraction * total * (1 - 1e-9) }
}

extension CallTreeNode {
  /// Display order: heaviest first, ties broken by name and module so output is stable.
  static func heavierFirst(_ a: CallTreeNode, _ b: CallTreeNode) -> Bool {
    if a.totalWeight != b.totalWeight { return a.totalWeight > b.totalWeight }
    if a.name != b.name { return a.name < b.name }
    return a.module < b.module
  }
}
