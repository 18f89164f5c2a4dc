import CPerfHeapScan

extension LeaksReport {
  /// "Why is it still alive?" for one type, as Xcode's memory graph answers it: the shortest
  /// paths from a root (a global, a thread's stack, a block older than the recording) to
  /// its instances that were allocated while recording and are still reachable at its end.
  public struct Retainers: Codable, Sendable, Equatable {
    public var type: String
    /// Instances allocated while recording and reachable at its end.
    public var instances: Int
    /// How many of them the paths were read for (the first ones in address order).
    public var examined: Int
    /// Distinct paths, most instances first.
    public var paths: [Path]

    public struct Path: Codable, Sendable, Equatable {
      /// What holds the first block of `steps`.
      public var root: Root
      /// From the block the root points to, to the instance: each block's type and the
      /// reference in the block before it that points to it (nil for the first).
      public var steps: [Step]
      /// Examined instances reached this way.
      public var instances: Int
    }

    public struct Root: Codable, Sendable, Equatable {
      /// "global", "stack" (a thread's stack or registers), "older block" (a heap block
      /// allocated before the recording, which the scan keeps alive whatever holds it).
      public var kind: String
      /// The global's symbol, or the older block's type, where known.
      public var name: String?
    }

    public struct Step: Codable, Sendable, Equatable {
      public var type: String
      /// Stored property name, "capture #k", "element", or "+offset" when unnamed.
      public var reference: String?
      /// For a block that is no Swift object (a C library's malloc), the function that
      /// allocated it, `symbol [module]`, where the recording kept its stack.
      public var allocatedBy: String? = nil
    }
  }

  /// The retainers of the types whose name (or unqualified name) is `type`.
  public func retainers(of type: String) -> [Retainers] {
    // "closure context" stands for every "closure context (captures: …)", as in the checks.
    (retainers ?? []).filter { Self.names($0.type, type) }
  }
}

extension LeaksReport.Retainers {
  /// One line per path: `3 of 3: global App.cache → App.Cache → (entries) App.Screen`.
  public func textLines() -> [String] {
    ["\(type): \(instances) alive at the end" + (examined < instances ? " (\(examined) examined)" : "")]
      + paths.map { "  \($0.instances) of \(examined): \($0.chain)" }
  }
}

extension LeaksReport.Retainers.Path {
  /// `global App.cache → App.Cache → (entries) App.Screen`: the root, then each block with
  /// the reference that points to it.
  public var chain: String {
    let start: String
    switch root.kind {
    case "global": start = "global " + (root.name ?? "?")
    case "older block": start = (root.name ?? "a block") + " allocated before the recording"
    default: start = "a thread's stack or registers"
    }
    return
      ([start]
      + steps.map { step in
        (step.reference.map { "(\($0)) " } ?? "") + step.type + (step.allocatedBy.map { " from \($0)" } ?? "")
      })
      .joined(separator: " → ")
  }
}

/// Shortest paths from the roots to the reachable blocks of a recording, breadth-first over
/// the references that keep their target alive.
///
/// The walk keeps a parent edge only for the nodes it queues (seeds and nodes with edges of
/// their own). A leaf's parent is found afterwards, for the leaves a report prints
/// (`resolveLeaves`): the walk's order is kept, so it is the edge the walk met first. A big
/// heap's leaves are most of its nodes: 16 M objects in an array were 64 MB of parent edges
/// written for them, nearly all of it fresh pages (about 170 ms).
struct RetainerPaths {
  static let unreached: Int32 = -2
  /// The nodes the seeds reach.
  private(set) var reached: NodeSet
  /// Per node, its parent edge + 2 (1 for a seed) where the walk queued it; 0 elsewhere.
  /// Zeroed by the kernel: the pages of a run of leaves are never touched.
  private let queuedParent: ZeroedColumn
  /// The nodes the walk queued, in its order.
  private let queue: [UInt32]
  /// Leaves' parent edges, found by `resolveLeaves`.
  private var leafParent: [Int: Int32] = [:]
  private let edgeTarget: GraphColumn<UInt32>
  /// Where each node's edges start (the graph's): an edge's source is found by binary
  /// search, for the few paths a report prints, instead of an array as long as the edges.
  private let edgeStart: GraphColumn<UInt32>

  /// `keepsAlive`: the edges walked over; nil, every edge (a call per edge was about 25 ms of a
  /// 16 M-object heap's walk where every edge is strong).
  init(graph: HeapGraph, seeds: [UInt32], keepsAlive: ((Int) -> Bool)?) {
    var reached = NodeSet(nodeCount: graph.nodeCount)
    let queuedParent = ZeroedColumn(count: graph.nodeCount)
    edgeStart = graph.edgeStart
    edgeTarget = graph.edgeTarget
    // Every reached node with edges passes through the queue once: reserved whole, its
    // pages are touched as it fills, and it is never copied to grow (a big heap's peak).
    // A node without edges is reached but never queued.
    var queue = seeds
    queue.reserveCapacity(graph.nodeCount)
    for seed in seeds {
      queuedParent.values[Int(seed)] = 1
      reached.insert(Int(seed))
    }
    // Through raw buffers: the checked accesses were most of a 16 M-block heap's walk.
    let parent = queuedParent.values
    withExtendedLifetime(queuedParent) {
      reached.withUnsafeMutableWords { reachedWords in
        graph.edgeStart.withUnsafeBufferPointer { edgeStart in
          graph.edgeTarget.withUnsafeBufferPointer { edgeTarget in
            var head = 0
            while head < queue.count {
              let node = Int(queue[head])
              head += 1
              for edge in Int(edgeStart[node])..<Int(edgeStart[node + 1]) where keepsAlive?(edge) ?? true {
                let target = Int(edgeTarget[edge])
                if !reachedWords.containsNode(target) {
                  reachedWords.insertNode(target)
                  if edgeStart[target] != edgeStart[target + 1] {
                    parent[target] = Int32(edge) + 2
                    queue.append(UInt32(target))
                  }
                }
              }
            }
          }
        }
      }
    }
    self.reached = reached
    self.queuedParent = queuedParent
    self.queue = queue
  }

  /// The edge from `node`'s parent on its shortest path: -1 for a seed, `unreached`, or nil
  /// for a reached leaf `resolveLeaves` was not given.
  func parentEdge(of node: Int) -> Int32? {
    guard reached[node] else { return Self.unreached }
    let queued = queuedParent.values[node]
    return queued != 0 ? queued - 2 : leafParent[node]
  }

  /// Finds the parent edges of the reached leaves among `nodes`: the walk's queue again, in
  /// its order, until each has the first edge that reached it (at most one pass over the
  /// queued nodes' edges).
  mutating func resolveLeaves(_ nodes: some Sequence<Int>, keepsAlive: ((Int) -> Bool)?) {
    var wanted = NodeSet(nodeCount: queuedParent.values.count)
    var left = 0
    for node in nodes where parentEdge(of: node) == nil && !wanted[node] {
      wanted.insert(node)
      left += 1
    }
    guard left > 0 else { return }
    var found: [Int: Int32] = [:]
    edgeStart.withUnsafeBufferPointer { edgeStart in
      edgeTarget.withUnsafeBufferPointer { edgeTarget in
        for node in queue where left > 0 {
          for edge in Int(edgeStart[Int(node)])..<Int(edgeStart[Int(node) + 1]) {
            let target = Int(edgeTarget[edge])
            guard wanted[target], keepsAlive?(edge) ?? true else { continue }
            found[target] = Int32(edge)
            wanted.remove(target)
            left -= 1
          }
        }
      }
    }
    leafParent.merge(found) { first, _ in first }
  }

  /// The nodes from a root to `node`, with the edge into each (nil for the root's node).
  /// A reached leaf must have been given to `resolveLeaves`.
  func path(to node: Int, limit: Int = 64) -> [(node: Int, edge: Int?)] {
    var steps: [(node: Int, edge: Int?)] = []
    var current = node
    while steps.count < limit {
      guard let edge = parentEdge(of: current) else {
        preconditionFailure("RetainerPaths.path(to: \(node)): leaf \(current) was not resolved")
      }
      if edge < 0 {
        steps.append((current, nil))
        break
      }
      steps.append((current, Int(edge)))
      current = source(ofEdge: UInt32(edge))
    }
    return steps.reversed()
  }

  /// The node whose edges include `edge`: the last node whose edges start at or before it
  /// (nodes without edges share their start with the next node, so the last one wins).
  private func source(ofEdge edge: UInt32) -> Int {
    var low = 0
    var high = edgeStart.count - 1  // edgeStart has nodeCount + 1 entries
    while low < high {
      let middle = (low + high + 1) / 2
      if edgeStart[middle] <= edge { low = middle } else { high = middle - 1 }
    }
    return low
  }
}
