import Testing

@testable import PerfHarness

/// Shortest paths over a hand-made graph: what a report prints is a chain of nodes and the
/// edges between them, and each edge's source is found by searching where the nodes' edges
/// start, across nodes that have none.
@Suite struct RetainerPathsTests {
  /// 0 → 2 and 0 → 3 (edges 0, 1); 3 → 5 (edge 2); 5 → 1 (edge 3); 1, 2 and 4 have no edges.
  static let graph = HeapGraph(
    blockIndex: [0, 1, 2, 3, 4, 5], recordedCount: 6, edgeStart: [0, 2, 2, 2, 3, 3, 4], edgeTarget: [2, 3, 5, 1],
    edgeOffset: [16, 24, 16, 16], marks: GraphColumn([UInt8](repeating: 0, count: 6)), threadsScanned: 1,
    unscannedThreads: 0,
    rootBytes: 0, scannedBytes: 0, scannerBytes: 0, scanNanoseconds: 0)

  /// No filter (nil) walks every edge, as a heap whose edges are all strong is walked.
  @Test func pathsRunFromTheSeedThroughEachEdgesSource() {
    var paths = RetainerPaths(graph: Self.graph, seeds: [0], keepsAlive: nil)
    #expect(paths.parentEdge(of: 1) == nil && paths.parentEdge(of: 2) == nil, "leaves are found when asked for")
    paths.resolveLeaves([1, 2, 0], keepsAlive: nil)
    #expect(paths.path(to: 1).map(\.node) == [0, 3, 5, 1])
    #expect(paths.path(to: 1).map(\.edge) == [nil, 1, 2, 3])
    #expect(paths.path(to: 2).map(\.node) == [0, 2])
    #expect(paths.path(to: 0).map(\.node) == [0])
    #expect(paths.parentEdge(of: 4) == -2, "node 4 is not reachable")
    #expect((0..<6).filter { paths.reached[$0] } == [0, 1, 2, 3, 5])
  }

  @Test func edgesThatDoNotKeepAliveAreNotFollowed() {
    let paths = RetainerPaths(graph: Self.graph, seeds: [0], keepsAlive: { $0 != 2 })
    #expect(paths.parentEdge(of: 5) == -2 && paths.parentEdge(of: 1) == -2)
    #expect(paths.reached.missing(below: 6) == [1, 4, 5])
    #expect(paths.path(to: 3).map(\.node) == [0, 3])
  }

  /// 0 → 3 (edge 0); 2 → 0 and 2 → 3 (edges 1, 2); 1 and 3 have no edges.
  static let twoWays = HeapGraph(
    blockIndex: [0, 1, 2, 3], recordedCount: 4, edgeStart: [0, 1, 1, 3, 3], edgeTarget: [3, 0, 3],
    edgeOffset: [16, 16, 24], marks: GraphColumn([UInt8](repeating: 0, count: 4)), threadsScanned: 1,
    unscannedThreads: 0,
    rootBytes: 0, scannedBytes: 0, scannerBytes: 0, scanNanoseconds: 0)

  /// A leaf's parent is the edge the walk met first, not the first edge into it by index.
  @Test(arguments: [([UInt32(2)], [2, 3], [nil, 2]), ([0, 2], [0, 3], [nil, 0]), ([3, 2], [3], [nil])])
  func aLeafIsReachedThroughTheEdgeTheWalkMetFirst(seeds: [UInt32], nodes: [Int], edges: [Int?]) {
    var paths = RetainerPaths(graph: Self.twoWays, seeds: seeds, keepsAlive: { _ in true })
    paths.resolveLeaves([3], keepsAlive: { _ in true })
    #expect(paths.path(to: 3).map(\.node) == nodes)
    #expect(paths.path(to: 3).map(\.edge) == edges)
  }
}
