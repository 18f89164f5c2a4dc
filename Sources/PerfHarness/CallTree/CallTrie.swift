/// A prefix tree of function paths in flat arrays: building it touches one hash table per
/// frame and allocates nothing per node, which keeps 100k deep samples well under a second.
/// Converted to nested ``CallTreeNode`` values only once, at the end.
struct CallTrie {
  var function: [Int32] = []
  var parent: [Int32] = []
  var total: [Double] = []
  /// Weight of the paths that end at this node.
  var end: [Double] = []
  var count: [Int] = []
  /// (parent + 1, function) → child; the parent of roots is -1.
  private var edges = EdgeTable()
  private(set) var totalWeight = 0.0
  private(set) var sampleCount = 0

  var nodeCount: Int { function.count }

  /// A ``CallTreePruning`` for this trie's total: rows lighter than `minimumWeight` or at
  /// `maxDepth` get no children.
  struct Cut {
    var minimumWeight: Double
    var maxDepth: Int
  }

  mutating func child(of parent: Int32, function id: Int32) -> Int32 {
    let key = UInt64(UInt32(bitPattern: parent &+ 1)) << 32 | UInt64(UInt32(bitPattern: id))
    let node = edges.findOrInsert(key, Int32(function.count))
    if node != Int32(function.count) { return node }
    function.append(id)
    self.parent.append(parent)
    total.append(0)
    end.append(0)
    count.append(0)
    return node
  }

  /// - Parameter samples: how many recorded samples the path stands for.
  mutating func insert(_ path: [Int32], weight: Double, samples: Int = 1) {
    var node: Int32 = -1
    for id in path {
      node = child(of: node, function: id)
      total[Int(node)] += weight
      count[Int(node)] += samples
    }
    if node >= 0 { end[Int(node)] += weight }
    totalWeight += weight
    sampleCount += samples
  }

  /// Children as first-child / next-sibling links, for walking the trie top-down.
  private func links() -> (firstChild: [Int32], nextSibling: [Int32], roots: [Int32]) {
    var firstChild = [Int32](repeating: -1, count: nodeCount)
    var nextSibling = [Int32](repeating: -1, count: nodeCount)
    var roots: [Int32] = []
    for node in stride(from: Int32(nodeCount - 1), through: 0, by: -1) {
      let p = parent[Int(node)]
      if p < 0 {
        roots.append(node)
      } else {
        nextSibling[Int(node)] = firstChild[Int(p)]
        firstChild[Int(p)] = node
      }
    }
    return (firstChild, nextSibling, roots.reversed())
  }

  /// The ordinary call tree. Self is the weight of samples whose leaf frame is the node: the
  /// path's end, or, inverted, the root (the leaf comes first).
  func nodes(functions: [ProfileFunction], inverted: Bool, cut: Cut? = nil, depth: Int = 0)
    -> [CallTreeNode]
  {
    build(functions: functions, cut: cut, depth: depth) { node, isRoot in
      inverted ? (isRoot ? total[node] : 0) : end[node]
    }
  }

  /// Top Functions: each function's subtrees from its first occurrence in every path, merged
  /// under one root. Merging whole subtrees of the unique-path trie (rather than re-inserting
  /// every sample once per function) keeps the cost proportional to distinct stacks.
  func topFunctionNodes(
    functions: [ProfileFunction], inverted: Bool, cut: Cut? = nil, depth: Int = 0
  ) -> [CallTreeNode] {
    let (firstChild, nextSibling, roots) = links()
    var top = CallTrie()
    var active = [Int32](repeating: 0, count: functions.count)
    // Pre-order walk; a negative entry marks leaving node (-entry - 1).
    var walk: [Int32] = roots.reversed()
    var merge: [(base: Int32, top: Int32)] = []
    while let entry = walk.popLast() {
      if entry < 0 {
        active[Int(function[Int(-entry - 1)])] -= 1
        continue
      }
      let fn = function[Int(entry)]
      if active[Int(fn)] == 0 {
        merge.append((entry, top.child(of: -1, function: fn)))
        while let (base, target) = merge.popLast() {
          top.total[Int(target)] += total[Int(base)]
          top.end[Int(target)] += end[Int(base)]
          top.count[Int(target)] += count[Int(base)]
          var child = firstChild[Int(base)]
          while child >= 0 {
            merge.append((child, top.child(of: target, function: function[Int(child)])))
            child = nextSibling[Int(child)]
          }
        }
      }
      active[Int(fn)] += 1
      walk.append(-entry - 1)
      var child = firstChild[Int(entry)]
      while child >= 0 {
        walk.append(child)
        child = nextSibling[Int(child)]
      }
    }

    var leafWeight = [Double](repeating: 0, count: functions.count)
    for node in 0..<nodeCount {
      if inverted {
        if parent[node] < 0 { leafWeight[Int(function[node])] += total[node] }
      } else {
        leafWeight[Int(function[node])] += end[node]
      }
    }
    return top.build(functions: functions, cut: cut, depth: depth) { node, isRoot in
      isRoot ? leafWeight[Int(top.function[node])] : (inverted ? 0 : top.end[node])
    }
  }

  /// Converts to nested values bottom-up without recursion (stacks can be thousands deep
  /// without Flatten Recursion): children always have higher indices than their parent.
  /// Children are ordered on the flat arrays first so each array is allocated once, exactly sized.
  /// Which nodes a pruned build makes, and which of those get their children: parents come
  /// before their children in the trie, so one pass in index order decides every node.
  private func kept(_ cut: Cut, rootDepth: Int) -> (made: [Bool], expanded: [Bool]) {
    var made = [Bool](repeating: false, count: nodeCount)
    var expanded = [Bool](repeating: false, count: nodeCount)
    var depth = [Int32](repeating: 0, count: nodeCount)
    for node in 0..<nodeCount {
      let p = Int(parent[node])
      made[node] = p < 0 || expanded[p]
      guard made[node] else { continue }
      depth[node] = p < 0 ? Int32(rootDepth) : depth[p] + 1
      expanded[node] = total[node] >= cut.minimumWeight && Int(depth[node]) < cut.maxDepth
    }
    return (made, expanded)
  }

  private func build(
    functions: [ProfileFunction], cut: Cut? = nil, depth rootDepth: Int = 0,
    selfWeight: (_ node: Int, _ isRoot: Bool) -> Double
  ) -> [CallTreeNode] {
    let (firstChild, nextSibling, rootIndices) = links()
    let (made, expanded) = cut.map { kept($0, rootDepth: rootDepth) } ?? ([], [])
    let templates = functions.map {
      CallTreeNode(
        name: $0.name, module: $0.module, isApp: $0.isApp, file: $0.file, line: $0.line,
        selfWeight: 0, totalWeight: 0, sampleCount: 0)
    }
    func heavierFirst(_ a: Int32, _ b: Int32) -> Bool {
      let (ta, tb) = (total[Int(a)], total[Int(b)])
      if ta != tb { return ta > tb }
      let (fa, fb) = (functions[Int(function[Int(a)])], functions[Int(function[Int(b)])])
      if fa.name != fb.name { return fa.name < fb.name }
      return fa.module < fb.module
    }
    var built = [CallTreeNode?](repeating: nil, count: nodeCount)
    var order: [Int32] = []
    for node in stride(from: nodeCount - 1, through: 0, by: -1) {
      if cut != nil && !made[node] { continue }
      order.removeAll(keepingCapacity: true)
      var child = cut == nil || expanded[node] ? firstChild[node] : -1
      while child >= 0 {
        order.append(child)
        child = nextSibling[Int(child)]
      }
      if order.count > 1 { order.sort(by: heavierFirst) }
      var row = templates[Int(function[node])]
      row.selfWeight = selfWeight(node, parent[node] < 0)
      row.totalWeight = total[node]
      row.sampleCount = count[node]
      if !order.isEmpty {
        row.children.reserveCapacity(order.count)
        for child in order {
          row.children.append(built[Int(child)].take()!)
        }
      }
      built[node] = row
    }
    return rootIndices.sorted(by: heavierFirst).map { built[Int($0)].take()! }
  }
}

/// Open addressing with a multiplicative hash: the trie's hot loop is one lookup per frame,
/// and Dictionary's seeded SipHash and resizing dominated it.
private struct EdgeTable {
  private var keys: [UInt64]
  private var values: [Int32]
  private var count = 0
  private var shift: UInt64
  private static let empty = UInt64.max

  init() {
    keys = [UInt64](repeating: Self.empty, count: 1024)
    values = [Int32](repeating: -1, count: 1024)
    shift = 64 - 10
  }

  /// The value stored for `key`, or `value` after storing it.
  mutating func findOrInsert(_ key: UInt64, _ value: Int32) -> Int32 {
    let mask = keys.count - 1
    var slot = Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> shift)
    while true {
      let existing = keys[slot]
      if existing == key { return values[slot] }
      if existing == Self.empty { break }
      slot = (slot + 1) & mask
    }
    keys[slot] = key
    values[slot] = value
    count += 1
    if count * 2 > keys.count { grow() }
    return value
  }

  private mutating func grow() {
    let oldKeys = keys
    let oldValues = values
    keys = [UInt64](repeating: Self.empty, count: oldKeys.count * 2)
    values = [Int32](repeating: -1, count: oldKeys.count * 2)
    shift -= 1
    let mask = keys.count - 1
    for (index, key) in oldKeys.enumerated() where key != Self.empty {
      var slot = Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> shift)
      while keys[slot] != Self.empty { slot = (slot + 1) & mask }
      keys[slot] = key
      values[slot] = oldValues[index]
    }
  }
}

extension Optional {
  fileprivate mutating func take() -> Wrapped? {
    defer { self = nil }
    return self
  }
}
