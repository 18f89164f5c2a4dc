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
