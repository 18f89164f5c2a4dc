import Testing

@testable import PerfHarness

/// The bit set the leak check keeps reachability in: what is missing from it is what leaked,
/// so a node lost or invented at a word's edge would be a false verdict.
@Suite struct NodeSetTests {
  @Test(arguments: [1, 63, 64, 65, 130])
  func theNodesMissingAreTheOnesNotInserted(nodeCount: Int) {
    var set = NodeSet(nodeCount: nodeCount)
    let inserted = Set((0..<nodeCount).filter { $0 % 3 == 0 || $0 == 63 || $0 == 64 })
    for node in inserted { set.insert(node) }
    #expect(set.missing(below: nodeCount) == (0..<nodeCount).filter { !inserted.contains($0) }.map { UInt32($0) })
    #expect((0..<nodeCount).allSatisfy { set[$0] == inserted.contains($0) })
  }

  @Test func aFullSetMissesNothing() {
    var set = NodeSet(nodeCount: 128)
    for node in 0..<128 { set.insert(node) }
    #expect(set.missing(below: 128).isEmpty)
  }
}

/// The per-node category column: 16 bits a node until an index needs more.
@Suite struct NodeCategoriesTests {
  @Test func indicesThatFitSixteenBitsAreKeptNarrow() {
    let column = NodeCategories(
      nodeCount: 3,
      narrow: { buffer in
        for node in 0..<3 { buffer[node] = UInt16(node * 2) }
        return true
      },
      wide: { _ in
        Issue.record("widened without need")
        return false
      })
    #expect((0..<3).map { column[$0] } == [0, 2, 4])
  }

  @Test func anIndexPastSixteenBitsWidensTheColumn() {
    let column = NodeCategories(
      nodeCount: 3,
      narrow: { buffer in
        buffer[0] = 1
        return false
      },
      wide: { buffer in
        for node in 0..<3 { buffer[node] = UInt32(70_000 + node) }
        return true
      })
    #expect((0..<3).map { column[$0] } == [70_000, 70_001, 70_002])
    #expect(column.nodes(in: 70_001) == [1] && column.nodes(in: 5).isEmpty)
  }

  @Test func theNodesOfACategoryAreListedInOrder() {
    let categories: [UInt16] = [3, 1, 3, 3, 0]
    let column = NodeCategories(
      nodeCount: categories.count,
      narrow: { buffer in
        for (node, category) in categories.enumerated() { buffer[node] = category }
        return true
      },
      wide: { _ in false })
    #expect(column.nodes(in: 3) == [0, 2, 3] && column.nodes(in: 0) == [4])
    #expect(column.nodes(in: 2).isEmpty && column.nodes(in: 70_000).isEmpty)
  }
}
