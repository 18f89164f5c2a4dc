/// The rings of a strongly connected group of leaked blocks that a developer must break.
///
/// A group can hold several rings: an owner whose stored closure captures it (a self-loop)
/// and whose children point back at it. Reporting only its shortest ring hid the others:
/// fixing the capture still leaked through the children. So every link between two types
/// inside the group lies on a listed ring: first the group's shortest ring, then, for each
/// link no listed ring passes yet, the shortest ring through it.

/// What a listed ring's group holds besides it.
struct RingGroup {
  /// Blocks in the strongly connected group.
  var blocks: Int
  /// The group had links left that no ring within ``LeaksReport/ringLimit`` passed.
  var hasMoreRings: Bool
}

extension LeaksReport.Cycle {
  /// Records the group a ring of this signature was found in (the largest group seen).
  mutating func note(_ group: RingGroup, ringBlocks: Int) {
    if group.blocks > ringBlocks { groupBlocks = max(groupBlocks ?? 0, group.blocks) }
    if group.hasMoreRings { groupHasMoreRings = true }
  }
}

extension LeakAnalysis {
  /// A reference from a block of one type to a block of another: what a developer breaks.
  private struct Link: Hashable {
    var from: String
    var to: String
  }

  /// The component's shortest ring, then the shortest ring through each link between two
  /// types that no listed ring passes yet (at most ``LeaksReport/ringLimit``), each
  /// rotated to start at its smallest type name.
  static func ringsThroughEveryLink(
    in component: [UInt32], graph: HeapGraph, isMember: inout NodeSet, isCycleEdge: (Int) -> Bool,
    typeName: (Int) -> String
  ) -> (rings: [[CyclePathStep]], hasMore: Bool) {
    let shortest = shortestCycle(
      in: component, graph: graph, isMember: &isMember, isCycleEdge: isCycleEdge, typeName: typeName)
    guard !shortest.isEmpty else { return ([], false) }
    var rings = [shortest]
    var covered = Set(links(of: shortest, graph: graph, typeName: typeName))
    for node in component { isMember.insert(Int(node)) }
    defer { for node in component { isMember.remove(Int(node)) } }
    // In a fixed order (type name, then where the block was recorded; lowest offset first),
    // so that one leak's groups list the same rings in every run.
    let nodes = component.map { Int($0) }.sorted {
      (typeName($0), graph.blockIndex(of: $0)) < (typeName($1), graph.blockIndex(of: $1))
    }
    for node in nodes {
      let range = Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
      for edge in range.sorted(by: { graph.edgeOffset[$0] < graph.edgeOffset[$1] }) where isCycleEdge(edge) {
        let target = Int(graph.edgeTarget[edge])
        guard isMember[target], !covered.contains(Link(from: typeName(node), to: typeName(target))) else { continue }
        guard rings.count < LeaksReport.ringLimit else { return (rings, true) }
        let ring = shortestRing(through: edge, from: node, graph: graph, isMember: isMember, isCycleEdge: isCycleEdge)
        covered.formUnion(links(of: ring, graph: graph, typeName: typeName))
        rings.append(rotatedToSmallestType(ring, typeName: typeName).steps)
      }
    }
    return (rings, false)
  }

  private static func links(of ring: [CyclePathStep], graph: HeapGraph, typeName: (Int) -> String) -> [Link] {
    ring.map { Link(from: typeName($0.node), to: typeName(Int(graph.edgeTarget[$0.edge]))) }
  }

  /// The edge, then the shortest way back from its target to its source inside the
  /// group (breadth-first; the edge lies inside a strongly connected group, so there is one).
  private static func shortestRing(
    through edge: Int, from source: Int, graph: HeapGraph, isMember: NodeSet, isCycleEdge: (Int) -> Bool
  ) -> [CyclePathStep] {
    let target = Int(graph.edgeTarget[edge])
    var parentEdge: [Int: Int] = [target: -1]
    var frontier = [target]
    search: while !frontier.isEmpty && parentEdge[source] == nil {
      var next: [Int] = []
      for node in frontier {
        let range = Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
        for step in range.sorted(by: { graph.edgeOffset[$0] < graph.edgeOffset[$1] }) where isCycleEdge(step) {
          let reached = Int(graph.edgeTarget[step])
          guard isMember[reached], parentEdge[reached] == nil else { continue }
          parentEdge[reached] = step
          if reached == source { break search }
          next.append(reached)
        }
      }
      frontier = next
    }
    // Back from the source to the target, then the edge itself first.
    var steps: [CyclePathStep] = []
    var node = source
    while node != target, let reaching = parentEdge[node], reaching >= 0 {
      let previous = Self.source(of: reaching, graph: graph)
      steps.append(CyclePathStep(node: previous, edge: reaching))
      node = previous
    }
    return [CyclePathStep(node: source, edge: edge)] + steps.reversed()
  }
}
