import CPerfHeapScan

/// The leaks instrument: scans the memory graph of a recording's live blocks and
/// classifies leaked blocks into root leaks, retain cycles and indirect leaks.
///
/// Call `scan` right after `AllocationRecorder.stop()`, while the recorded blocks are still
/// live. Only blocks allocated while recording are nodes: pointers to older blocks are not
/// edges, and older blocks are not roots (a block allocated while recording that only an
/// older heap block references is reported as leaked).
enum LeakAnalysis {
  /// How a reference counts.
  enum EdgeKind: UInt8 {
    /// Keeps its target alive; part of retain cycles.
    case strong
    /// `unowned` / `unowned(unsafe)` (from field metadata): keeps memory, not a retain.
    case unowned
    /// A reference to a weak side table (`weak`): ignored.
    case weak
    /// An object's refcount word naming its side table: keeps the side table, no cycle.
    case sideTable
  }

  /// Stops `recorder`, scrubs the stack that stopping used, and scans: the way to call the
  /// leaks instrument at the end of a run (nothing `stop()` left on the stack can then
  /// look like a root).
  @inline(never)
  static func stopAndScan(
    recorder: AllocationRecorder, symbolizer: Symbolizer?, suppressions: LeakSuppressions = .none,
    options: HeapGraph.Options = HeapGraph.Options()
  ) throws -> (AllocationRecording, LeaksReport) {
    let recording = recorder.stop()
    scrubStack()
    return (
      recording,
      try scan(recording: recording, symbolizer: symbolizer, suppressions: suppressions, options: options)
    )
  }

  /// Runs `body` on a new thread whose stack is fresh zero-filled memory, and returns its
  /// result. Run a scenario and its leak scan there: no stale slot of earlier work lies
  /// in the frames above it, so none can keep a leaked block "reachable" by accident.
  static func runOnCleanStack<T>(stackBytes: Int = 8 << 20, _ body: () throws -> T) throws -> T {
    var result: Result<T, any Error>?
    try withoutActuallyEscaping(body) { escapable in
      let job = CleanStackJob { result = Result { try escapable() } }
      let status = withExtendedLifetime(job) {
        CPerfHeapScan_runOnCleanStack(
          { raw in Unmanaged<CleanStackJob>.fromOpaque(raw!).takeUnretainedValue().run() },
          Unmanaged.passUnretained(job).toOpaque(), UInt64(stackBytes))
      }
      if status != 0 { throw HeapScanError(call: "pthread_create", errnoValue: status) }
    }
    return try result!.get()
  }

  /// Zeroes the stack below the caller, so stale slots of functions that returned (the
  /// scenario, the recorder's stop) cannot keep leaked blocks "reachable".
  @inline(never)
  static func scrubStack(bytes: Int = 65536) {
    CPerfHeapScan_scrubStack(UInt32(clamping: bytes))
  }

  static func scan(
    recording: AllocationRecording, symbolizer: Symbolizer?, suppressions: LeakSuppressions = .none,
    options: HeapGraph.Options = HeapGraph.Options()
  ) throws -> LeaksReport {
    let start = ContinuousClock.now
    let graph = try HeapGraph.scan(blocks: recording.liveBlocks, options: options)
    var report = classify(graph: graph, recording: recording, symbolizer: symbolizer, suppressions: suppressions)
    let elapsed = (ContinuousClock.now - start).components
    report.analysisMilliseconds = Double(elapsed.seconds) * 1000 + Double(elapsed.attoseconds) / 1e15
    return report
  }

  /// The per-node facts the classification needs, from the recording.
  struct NodeInfo {
    var categories: [AllocationCategory]
    /// Index into `categories` per node.
    var category: [UInt32]
  }

  static func classify(
    graph: HeapGraph, recording: AllocationRecording, symbolizer: Symbolizer?, suppressions: LeakSuppressions
  ) -> LeaksReport {
    let nodeCount = graph.nodeCount
    let blocks = recording.liveBlocks
    func block(_ node: Int) -> RecordedBlock { blocks[Int(graph.blockIndex[node])] }

    // Categories per node (interned).
    var categoryIndex: [AllocationCategoryKey: UInt32] = [:]
    var categories: [AllocationCategory] = []
    var nodeCategory = [UInt32](repeating: 0, count: nodeCount)
    for node in 0..<nodeCount {
      let key = block(node).categoryKey
      if let known = categoryIndex[key] {
        nodeCategory[node] = known
      } else {
        let index = UInt32(categories.count)
        categories.append(recording.category(for: key))
        categoryIndex[key] = index
        nodeCategory[node] = index
      }
    }

    // Edge kinds: side-table flags from the scanner, ownership from field metadata.
    var fieldReader = FieldLayoutReader()
    var ownershipCache: [UInt: [Int: EdgeKind]] = [:]  // metadata -> offset -> kind (non-strong only)
    func ownership(metadata: UInt) -> [Int: EdgeKind] {
      if let cached = ownershipCache[metadata] { return cached }
      var result: [Int: EdgeKind] = [:]
      for field in fieldReader.fields(ofClassMetadata: metadata) {
        switch field.ownership {
        case .unowned, .unownedUnsafe: result[field.offset] = .unowned
        case .weak: result[field.offset] = .weak
        case .strong: break
        }
      }
      ownershipCache[metadata] = result
      return result
    }
    var edgeKind = [EdgeKind](repeating: .strong, count: graph.edgeCount)
    for node in 0..<nodeCount {
      let range = Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
      if range.isEmpty { continue }
      let isClass = categories[Int(nodeCategory[node])].kind == .swiftClass
      let fields = isClass ? ownership(metadata: block(node).metadata) : [:]
      for edge in range {
        let raw = graph.edgeOffset[edge]
        if raw & UInt32(CPerfHeapScan_EdgeWeak) != 0 {
          edgeKind[edge] = .weak
        } else if raw & UInt32(CPerfHeapScan_EdgeSideTable) != 0 {
          edgeKind[edge] = .sideTable
        } else if let kind = fields[Int(raw & UInt32(CPerfHeapScan_EdgeOffsetMask))] {
          edgeKind[edge] = kind
        }
      }
    }

    // Reachability from the roots through everything but weak references.
    var reachable = [Bool](repeating: false, count: nodeCount)
    var stack: [UInt32] = []
    func markReachable(from seeds: [UInt32]) {
      stack.append(contentsOf: seeds)
      for seed in seeds { reachable[Int(seed)] = true }
      while let node = stack.popLast() {
        for edge in Int(graph.edgeStart[Int(node)])..<Int(graph.edgeStart[Int(node) + 1])
        where edgeKind[edge] != .weak {
          let target = Int(graph.edgeTarget[edge])
          if !reachable[target] {
            reachable[target] = true
            stack.append(UInt32(target))
          }
        }
      }
    }
    markReachable(from: (0..<nodeCount).filter { HeapGraph.isRoot(graph.marks[$0]) }.map { UInt32($0) })

    // Stacks are symbolized once per stack id.
    let symbolizing = AllocationsAnalysis()
    var stackCache: [UInt32: [AllocationsReport.StackFrame]] = [:]
    func stackOf(_ node: Int) -> [AllocationsReport.StackFrame] {
      let id = block(node).stackID
      if id == 0 { return [] }
      if let cached = stackCache[id] { return cached }
      let frames = symbolizing.symbolize(recording.stacks[id] ?? [], symbolizer: symbolizer)
      stackCache[id] = frames
      return frames
    }
    func typeName(_ node: Int) -> String { categories[Int(nodeCategory[node])].name }

    // Suppressions: suppressed leaked blocks become roots.
    var suppressedCount = 0
    var suppressedBytes = 0
    if !suppressions.isEmpty {
      let leakedBefore = (0..<nodeCount).filter { !reachable[$0] }
      var seeds: [UInt32] = []
      for node in leakedBefore
      where suppressions.matches(
        type: typeName(node), stack: suppressions.hasStackPatterns ? stackOf(node) : [])
      {
        seeds.append(UInt32(node))
      }
      markReachable(from: seeds)
      for node in leakedBefore where reachable[node] {
        suppressedCount += 1
        suppressedBytes += block(node).size
      }
    }

    // Leaked nodes, compact numbering.
    var leaked: [UInt32] = []
    for node in 0..<nodeCount where !reachable[node] { leaked.append(UInt32(node)) }
    func isCycleEdge(_ edge: Int) -> Bool { edgeKind[edge] == .strong }

    let components = stronglyConnectedComponents(
      leaked: leaked, graph: graph, reachable: reachable, isCycleEdge: isCycleEdge)
    var inCycle = [Bool](repeating: false, count: nodeCount)
    var cycleComponents: [[UInt32]] = []
    for component in components {
      var isCycle = component.count > 1
      if component.count == 1 {
        let node = Int(component[0])
        for edge in Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
        where isCycleEdge(edge) && Int(graph.edgeTarget[edge]) == node {
          isCycle = true
        }
      }
      if isCycle {
        cycleComponents.append(component)
        for node in component { inCycle[Int(node)] = true }
      }
    }

    // Root vs indirect: referenced by another leaked block through an owning edge
    // (strong, or an object's side table)? `unowned` back references do not make their
    // target indirect.
    var referencedByLeaked = [Bool](repeating: false, count: nodeCount)
    for node in leaked {
      for edge in Int(graph.edgeStart[Int(node)])..<Int(graph.edgeStart[Int(node) + 1])
      where edgeKind[edge] == .strong || edgeKind[edge] == .sideTable {
        let target = Int(graph.edgeTarget[edge])
        if target != Int(node) { referencedByLeaked[target] = true }
      }
    }
    var leakedBytes = 0
    var indirectCount = 0
    var indirectBytes = 0
    struct RootTally {
      var bytes = 0
      var count = 0
      var example = 0
    }
    var rootTallies: [String: RootTally] = [:]
    var indirectTallies: [String: RootTally] = [:]
    for node32 in leaked {
      let node = Int(node32)
      let size = block(node).size
      leakedBytes += size
      if inCycle[node] { continue }
      if referencedByLeaked[node] {
        indirectCount += 1
        indirectBytes += size
        var tally = indirectTallies[typeName(node), default: RootTally(example: node)]
        tally.bytes += size
        tally.count += 1
        indirectTallies[typeName(node)] = tally
      } else {
        var tally = rootTallies[typeName(node), default: RootTally(example: node)]
        tally.bytes += size
        tally.count += 1
        rootTallies[typeName(node)] = tally
      }
    }
    func aggregate(_ tallies: [String: RootTally], withStacks: Bool) -> [LeaksReport.RootLeak] {
      tallies.map { name, tally in
        LeaksReport.RootLeak(
          type: name, bytes: tally.bytes, count: tally.count,
          allocationStack: withStacks ? stackOf(tally.example) : [])
      }.sorted { ($0.bytes, $1.type) > ($1.bytes, $0.type) }
    }
    let rootLeaks = aggregate(rootTallies, withStacks: true)
    let indirectLeaks = aggregate(indirectTallies, withStacks: false)

    // Cycles, aggregated by signature.
    var namer = EdgeNamer(fieldReader: fieldReader)
    var cycleIndexBySignature: [String: Int] = [:]
    var cycles: [LeaksReport.Cycle] = []
    for component in cycleComponents {
      // Canonical node order: by type name, then by the shape of outgoing edges, then address.
      let members = component.map { Int($0) }.sorted { lhs, rhs in
        let (l, r) = (typeName(lhs), typeName(rhs))
        if l != r { return l < r }
        return block(lhs).address < block(rhs).address
      }
      var position: [Int: Int] = [:]
      for (index, node) in members.enumerated() { position[node] = index }
      func reportEdge(from node: Int, edge: Int, to index: Int) -> LeaksReport.Cycle.Edge {
        let offset = Int(graph.edgeOffset[edge] & UInt32(CPerfHeapScan_EdgeOffsetMask))
        return LeaksReport.Cycle.Edge(
          from: position[node]!, to: index, offset: offset,
          name: namer.name(
            for: block(node), category: categories[Int(nodeCategory[node])], offset: offset, graph: graph, node: node),
          kind: edgeKind[edge] == .strong ? "strong" : "unowned")
      }
      var edges: [LeaksReport.Cycle.Edge] = []
      for node in members {
        for edge in Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1]) where edgeKind[edge] != .weak {
          guard let to = position[Int(graph.edgeTarget[edge])] else { continue }
          edges.append(reportEdge(from: node, edge: edge, to: to))
        }
      }
      let signature =
        members.map(typeName).sorted().joined(separator: "|") + "#"
        + edges.map { "\(typeName(members[$0.from]))>\(typeName(members[$0.to]))@\($0.offset)" }.sorted().joined(
          separator: "|")
      if let existing = cycleIndexBySignature[signature] {
        cycles[existing].instances += 1
        continue
      }
      // Neighbourhood: leaked blocks one step away.
      var neighbors: [LeaksReport.Cycle.Node] = []
      var neighborEdges: [LeaksReport.Cycle.Edge] = []
      var neighborPosition: [Int: Int] = [:]
      let neighborLimit = 24
      func neighborIndex(_ node: Int) -> Int? {
        if let known = neighborPosition[node] { return known }
        guard neighbors.count < neighborLimit else { return nil }
        let index = members.count + neighbors.count
        neighbors.append(
          LeaksReport.Cycle.Node(type: typeName(node), bytes: block(node).size, allocationStack: []))
        neighborPosition[node] = index
        return index
      }
      for node in members {
        for edge in Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
        where edgeKind[edge] != .weak && edgeKind[edge] != .sideTable {
          let target = Int(graph.edgeTarget[edge])
          guard position[target] == nil, !reachable[target], let index = neighborIndex(target) else { continue }
          neighborEdges.append(reportEdge(from: node, edge: edge, to: index))
        }
      }
      cycleIndexBySignature[signature] = cycles.count
      cycles.append(
        LeaksReport.Cycle(
          nodes: members.map {
            LeaksReport.Cycle.Node(type: typeName($0), bytes: block($0).size, allocationStack: stackOf($0))
          },
          edges: edges, instances: 1, neighbors: neighbors, neighborEdges: neighborEdges))
    }
    cycles.sort { ($0.instances, $0.nodes.count) > ($1.instances, $1.nodes.count) }

    return LeaksReport(
      leakedCount: leaked.count, leakedBytes: leakedBytes, rootLeaks: rootLeaks,
      indirectLeakCount: indirectCount, indirectLeakBytes: indirectBytes,
      indirectLeaks: indirectLeaks, cycles: cycles,
      unscannedThreads: graph.unscannedThreads, threadsScanned: graph.threadsScanned,
      scanMilliseconds: Double(graph.scanNanoseconds) / 1e6, blocksScanned: nodeCount,
      edgeCount: graph.edgeCount, suppressedCount: suppressedCount, suppressedBytes: suppressedBytes)
  }

  /// Tarjan's algorithm, iterative, over the leaked nodes and the edges `isCycleEdge`
  /// keeps. Returns every component (singletons included).
  static func stronglyConnectedComponents(
    leaked: [UInt32], graph: HeapGraph, reachable: [Bool], isCycleEdge: (Int) -> Bool
  ) -> [[UInt32]] {
    let unvisited = UInt32.max
    var index = [UInt32](repeating: unvisited, count: graph.nodeCount)
    var lowLink = [UInt32](repeating: 0, count: graph.nodeCount)
    var onStack = [Bool](repeating: false, count: graph.nodeCount)
    var tarjanStack: [UInt32] = []
    // Call stack frames: (node, next edge to look at).
    var callStack: [(node: UInt32, edge: UInt32)] = []
    var counter: UInt32 = 0
    var components: [[UInt32]] = []
    for root in leaked where index[Int(root)] == unvisited {
      index[Int(root)] = counter
      lowLink[Int(root)] = counter
      counter += 1
      tarjanStack.append(root)
      onStack[Int(root)] = true
      callStack.append((root, graph.edgeStart[Int(root)]))
      while let frame = callStack.last {
        let node = Int(frame.node)
        let end = graph.edgeStart[node + 1]
        var edge = frame.edge
        var descended = false
        while edge < end {
          let current = Int(edge)
          edge += 1
          guard isCycleEdge(current) else { continue }
          let target = Int(graph.edgeTarget[current])
          if reachable[target] { continue }
          if index[target] == unvisited {
            callStack[callStack.count - 1].edge = edge
            index[target] = counter
            lowLink[target] = counter
            counter += 1
            tarjanStack.append(UInt32(target))
            onStack[target] = true
            callStack.append((UInt32(target), graph.edgeStart[target]))
            descended = true
            break
          } else if onStack[target] {
            lowLink[node] = min(lowLink[node], index[target])
          }
        }
        if descended { continue }
        callStack.removeLast()
        if let parent = callStack.last {
          lowLink[Int(parent.node)] = min(lowLink[Int(parent.node)], lowLink[node])
        }
        if lowLink[node] == index[node] {
          var component: [UInt32] = []
          while let member = tarjanStack.popLast() {
            onStack[Int(member)] = false
            component.append(member)
            if Int(member) == node { break }
          }
          components.append(component)
        }
      }
    }
    return components
  }
}

/// Names the reference at `offset` of a block: the stored property of a class instance,
/// "capture #k" (k from 1, by offset among the context's references) for a closure context.
struct EdgeNamer {
  var fieldReader: FieldLayoutReader

  mutating func name(
    for block: RecordedBlock, category: AllocationCategory, offset: Int, graph: HeapGraph, node: Int
  ) -> String? {
    switch category.kind {
    case .swiftClass:
      return fieldReader.field(ofClassMetadata: block.metadata, at: offset)?.name
    case .closureContext:
      var offsets: [Int] = []
      for edge in Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1]) {
        let value = Int(graph.edgeOffset[edge] & UInt32(CPerfHeapScan_EdgeOffsetMask))
        if value >= 16, offsets.last != value { offsets.append(value) }
      }
      guard let rank = offsets.firstIndex(of: offset) else { return nil }
      return "capture #\(rank + 1)"
    default:
      return nil
    }
  }
}

private final class CleanStackJob {
  let run: () -> Void
  init(_ run: @escaping () -> Void) { self.run = run }
}
