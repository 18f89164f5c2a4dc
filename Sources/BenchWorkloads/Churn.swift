/// The allocation-heavy workload `make bench` measures: the same code under perfharness
/// and under the peers (heaptrack, valgrind).
public final class ChurnNode {
  public var value: Int
  public var next: ChurnNode?
  public init(_ value: Int) { self.value = value }
}

/// Allocates and frees `operations` blocks (class instances and array buffers, one in a
/// hundred instances kept) at a call depth of `depth`.
@inline(never)
public func churn(depth: Int, operations: Int, kept: inout [ChurnNode]) {
  if depth > 0 {
    churn(depth: depth - 1, operations: operations, kept: &kept)
    // Work after the call: a tail call would become a loop in a release build, and the
    // stacks would not be `depth` frames deep.
    blackHole(depth)
    return
  }
  for index in 0..<(operations / 2) {
    let node = ChurnNode(index)
    var buffer = [Int](repeating: index, count: 4 + index % 12)
    buffer[0] = node.value
    if index % 100 == 0 { kept.append(node) }
    blackHole(buffer[0])
  }
}

@inline(never) public func blackHole(_ value: Int) { withExtendedLifetime(value) {} }

/// Operations per run: at least 2 million malloc+free.
public let churnOperations = 2_400_000

/// A node of the long-lived workload's trees.
public final class TreeNode {
  public var left: TreeNode?
  public var right: TreeNode?
  public var value: Int
  public init(_ value: Int) { self.value = value }
}

/// The workload whose blocks live long (what a cache of young blocks would not hold): `trees` binary trees of
/// `nodes` class instances each, built breadth first and all kept until the end, with a
/// dictionary of every hundredth node by value; returns the sum of the values (so nothing is
/// optimized away). Everything is freed when it returns.
@inline(never)
public func buildTrees(trees: Int, nodes: Int) -> Int {
  var roots: [TreeNode] = []
  var index: [Int: TreeNode] = [:]
  var sum = 0
  for tree in 0..<trees {
    let root = TreeNode(tree)
    var level = [root]
    var made = 1
    while made < nodes {
      var next: [TreeNode] = []
      next.reserveCapacity(level.count * 2)
      for parent in level where made < nodes {
        let left = TreeNode(made)
        parent.left = left
        next.append(left)
        made += 1
        if made % 100 == 0 { index[made + tree * nodes] = left }
        guard made < nodes else { break }
        let right = TreeNode(made)
        parent.right = right
        next.append(right)
        made += 1
      }
      level = next
    }
    roots.append(root)
  }
  for node in index.values { sum &+= node.value }
  withExtendedLifetime(roots) {}
  return sum
}
