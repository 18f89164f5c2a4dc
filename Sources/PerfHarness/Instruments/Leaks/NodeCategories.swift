/// Each node's index into a leak check's categories: 16 bits a node while the indices fit
/// (a program has hundreds of types, not 65,536), 32 past that. A big heap's per-node
/// arrays are fresh pages the check pays for: 32 MB less at 16 M blocks.
struct NodeCategories {
  private var narrow: [UInt16] = []
  private var wide: [UInt32] = []

  /// Fills the column through `narrow`, or through `wide` when `narrow` returns false (an
  /// index that does not fit 16 bits). Each writes every node's index.
  init(
    nodeCount: Int, narrow fillNarrow: (UnsafeMutableBufferPointer<UInt16>) -> Bool,
    wide fillWide: (UnsafeMutableBufferPointer<UInt32>) -> Bool
  ) {
    var fits = true
    narrow = [UInt16](unsafeUninitializedCapacity: nodeCount) { buffer, initialized in
      fits = fillNarrow(buffer)
      initialized = fits ? nodeCount : 0
    }
    guard !fits else { return }
    var complete = true
    wide = [UInt32](unsafeUninitializedCapacity: nodeCount) { buffer, initialized in
      complete = fillWide(buffer)
      initialized = nodeCount
    }
    precondition(complete, "NodeCategories: an index past 32 bits")
  }

  subscript(node: Int) -> Int {
    wide.isEmpty ? Int(narrow[node]) : Int(wide[node])
  }

  /// The nodes whose category index is `category`, in order: one pass over the column's
  /// raw buffer (a big heap's per-node filters were a closure call a node).
  func nodes(in category: Int) -> [Int] {
    wide.isEmpty ? Self.nodes(of: narrow, category) : Self.nodes(of: wide, category)
  }

  private static func nodes<Element: FixedWidthInteger>(of column: [Element], _ category: Int) -> [Int] {
    guard let wanted = Element(exactly: category) else { return [] }
    return column.withUnsafeBufferPointer { indices in (0..<indices.count).filter { indices[$0] == wanted } }
  }
}
