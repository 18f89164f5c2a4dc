/// A set of a heap graph's nodes, one bit a node. A leak check's per-node facts are held for
/// every block of the heap at once: a byte a node was 16 MB of fresh pages at 16 M blocks,
/// and first touches of fresh pages were most of what those steps cost.
struct NodeSet {
  private(set) var words: [UInt64]

  /// An empty set of nodes below `nodeCount`.
  init(nodeCount: Int) {
    words = [UInt64](repeating: 0, count: (nodeCount + 63) / 64)
  }

  /// Where `node`'s bit is: its word and the bit in it.
  @inline(__always) static func place(of node: Int) -> (word: Int, bit: UInt64) { (node >> 6, 1 << UInt64(node & 63)) }

  subscript(node: Int) -> Bool {
    let (word, bit) = Self.place(of: node)
    return words[word] & bit != 0
  }

  mutating func insert(_ node: Int) {
    let (word, bit) = Self.place(of: node)
    words[word] |= bit
  }

  mutating func remove(_ node: Int) {
    let (word, bit) = Self.place(of: node)
    words[word] &= ~bit
  }

  /// The nodes below `nodeCount` that are not in the set, in order: a word at a time, so
  /// a heap that is all reached costs a read per 64 nodes.
  func missing(below nodeCount: Int) -> [UInt32] {
    var nodes: [UInt32] = []
    for (index, word) in words.enumerated() where word != .max {
      var absent = ~word
      while absent != 0 {
        let node = index << 6 + absent.trailingZeroBitCount
        if node >= nodeCount { break }
        nodes.append(UInt32(node))
        absent &= absent - 1
      }
    }
    return nodes
  }

  /// The set's words, for a loop that reads and writes it without the checked accesses.
  mutating func withUnsafeMutableWords<R>(_ body: (UnsafeMutableBufferPointer<UInt64>) throws -> R) rethrows -> R {
    try words.withUnsafeMutableBufferPointer { try body($0) }
  }
}

extension UnsafeMutableBufferPointer<UInt64> {
  /// The bit of `node` in a `NodeSet`'s words.
  @inline(__always) func containsNode(_ node: Int) -> Bool {
    let (word, bit) = NodeSet.place(of: node)
    return self[word] & bit != 0
  }

  @inline(__always) func insertNode(_ node: Int) {
    let (word, bit) = NodeSet.place(of: node)
    self[word] |= bit
  }
}
