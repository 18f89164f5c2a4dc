import CPerfAlloc
import CPerfHeapScan

/// The leaks instrument: scans the memory graph of a recording's live blocks and
/// classifies leaked blocks into root leaks, retain cycles and indirect leaks.
///
/// Call `scan` right after `AllocationRecorder.stop()`, while the recorded blocks are still
/// live. Only blocks allocated while recording can be reported. When the process tracked
/// every block from its start (the CLI's scenario processes do), the older live blocks are
/// holders: their words are scanned and whatever they point to is alive, whether or not
/// the scan finds a path to them (a leak from before the recording is not this
/// recording's). Otherwise older blocks are unknown, and a block allocated while recording
/// that only an older heap block references is reported as leaked.
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
    /// A stored property of a number type whose value happens to look like an address
    /// (a hash seed derived from the object's own address, say): ignored.
    case notAReference

    /// Whether the edge keeps its target reachable.
    var keepsAlive: Bool { self != .weak && self != .notAReference }
  }

  /// Every edge's kind: strong, and an array of a byte an edge only once one is not (a
  /// heap of strong references, 16 M objects in an array, needs none: 16 MB of fresh pages).
  struct EdgeKinds {
    private var kinds: [EdgeKind] = []
    let count: Int

    init(count: Int) { self.count = count }

    subscript(edge: Int) -> EdgeKind {
      get { kinds.isEmpty ? .strong : kinds[edge] }
      set {
        if kinds.isEmpty {
          if newValue == .strong { return }
          kinds = [EdgeKind](repeating: .strong, count: count)
        }
        kinds[edge] = newValue
      }
    }

    var allStrong: Bool { kinds.isEmpty }

    /// The kinds as a buffer, nil while every edge is strong: for the loops over a big heap's
    /// edges.
    func withUnsafeKinds<R>(_ body: (UnsafeBufferPointer<EdgeKind>?) throws -> R) rethrows -> R {
      if kinds.isEmpty { return try body(nil) }
      return try kinds.withUnsafeBufferPointer { try body($0) }
    }
  }

  /// Stored-property types that never hold a reference (as `_typeName(_, qualified: false)`
  /// spells them).
  static let numberTypeNames: Set<String> = [
    "Int", "UInt", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Double", "Float",
    "Bool", "Hasher",
  ]

  /// Stops `recorder`, scrubs the stack that stopping used, and scans, leaving out the
  /// blocks freed after the stop's listing: the way to call the leaks instrument at the end
  /// of a run (nothing `stop()` left on the stack can then look like a root). `symbolizer`
  /// is made after the stop, so its allocations are not part of the graph.
  @inline(never)
  static func stopAndScan(
    recorder: AllocationRecorder, symbolizer: @autoclosure () throws -> Symbolizer?,
    suppressions: LeakSuppressions = .none, options: HeapGraph.Options = HeapGraph.Options()
  ) throws -> (AllocationRecording, LeaksReport) {
    AllocationRecorder.watchFrees()
    defer { AllocationRecorder.endWatchingFrees() }
    let recording = recorder.stop(keepingFreedWords: true)
    scrubStack()
    var options = options
    options.leavesOutFreedBlocks = true
    return (
      recording,
      try scan(recording: recording, symbolizer: try symbolizer(), suppressions: suppressions, options: options)
    )
  }

  /// From here to the scan, a listed block that this thread frees leaves a copy of its words
  /// (`CPerfAlloc_keepFreedWords`): the analysis's own work grows tables of the runtime's
  /// (naming a type grows the cache of type names), which move to blocks no listing holds.
  /// Only a listing in address order, kept in `blocks` (alive past the scan, unchanged).
  @inline(never)
  static func keepFreedWords(of blocks: [RecordedBlock]) {
    guard RecordedBlock.hasListingLayout, !blocks.isEmpty else { return }
    blocks.withUnsafeBufferPointer { buffer in
      for index in 1..<buffer.count where buffer[index - 1].address >= buffer[index].address { return }
      buffer.withMemoryRebound(to: CPerfAlloc_Block.self) { listing in
        CPerfAlloc_keepFreedWords(listing.baseAddress, UInt64(listing.count))
      }
    }
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

  /// - Parameter stillLive: for a scan while recording goes on: called right after the
  ///   graph scan, returns the blocks of `recording.liveBlocks` that are still live. The
  ///   others were freed while the scan ran: they are not judged (treated as roots).
  static func scan(
    recording: AllocationRecording, symbolizer: Symbolizer?, suppressions: LeakSuppressions = .none,
    options: HeapGraph.Options = HeapGraph.Options(), stillLive: (() -> Set<RecordedBlock>)? = nil,
    describesRetainers: Bool = true
  ) throws -> LeaksReport {
    let start = ContinuousClock.now
    var arrayStorage: [UInt: Int] = [:]
    for (key, category) in recording.categories where category.name.hasPrefix(ArrayStorageLayout.storagePrefix) {
      if case .swiftObject(let metadata) = key {
        arrayStorage[metadata] = ArrayStorageLayout.elementStride(storageMetadata: metadata, name: category.name) ?? 0
      }
    }
    let graph = try HeapGraph.scan(
      blocks: recording.liveBlocks, holders: recording.preexistingBlocks, arrayStorage: arrayStorage,
      layouts: ReferenceLayouts.read(categories: recording.categories),
      options: options)
    var freedMeanwhile: Set<UInt> = []
    if let stillLive {
      let live = stillLive()
      for block in recording.liveBlocks where !live.contains(block) { freedMeanwhile.insert(block.address) }
    }
    var report = classify(
      graph: graph, recording: recording, symbolizer: symbolizer, suppressions: suppressions,
      notJudged: freedMeanwhile, describesRetainers: describesRetainers)
    report.analysisMilliseconds = (ContinuousClock.now - start).milliseconds
    return report
  }

  /// The per-node facts the classification needs, from the recording.
  struct NodeInfo {
    var categories: [AllocationCategory]
    /// Index into `categories` per node.
    var category: [UInt32]
  }

  /// - Parameter notJudged: addresses of blocks freed while the graph was scanned: roots,
  ///   never reported.
  static func classify(
    graph: HeapGraph, recording: AllocationRecording, symbolizer: Symbolizer?, suppressions: LeakSuppressions,
    notJudged: Set<UInt> = [], describesRetainers: Bool = true
  ) -> LeaksReport {
    let suppressions = LeakSuppressions(
      patterns: suppressions.patterns + LeakSuppressions.systemLibraries.patterns
    ).matcher()
    let nodeCount = graph.nodeCount
    let blocks = recording.liveBlocks
    let holders = recording.preexistingBlocks
    func block(_ node: Int) -> RecordedBlock {
      let index = graph.blockIndex(of: node)
      return index < blocks.count ? blocks[index] : holders[index - blocks.count]
    }

    // Categories per node (interned).
    var categoryIndex: [AllocationCategoryKey: UInt32] = [:]
    var namedCategories: [AllocationCategory] = []
    // Nodes are in address order, where neighbours are mostly of one type: the previous
    // node's category is tried before the dictionary (a lookup per node of a 16 M-block heap),
    // by its raw key (building and comparing the enum was most of this loop's 106 ms on 16 M
    // blocks), through raw buffers (checked accesses through `block` were most of its 65 ms
    // before that). Returns false when an index does not fit `Index`.
    func fill<Index: FixedWidthInteger>(_ categoryOf: UnsafeMutableBufferPointer<Index>) -> Bool {
      var previous: (rawKey: UInt64, index: UInt32)?
      return blocks.withUnsafeBufferPointer { listed in
        holders.withUnsafeBufferPointer { held in
          graph.blockIndex.withUnsafeBufferPointer { blockIndex in
            for node in 0..<nodeCount {
              let blockAt = blockIndex.isEmpty ? node : Int(blockIndex[node])
              let rawKey = (blockAt < listed.count ? listed[blockAt] : held[blockAt - listed.count]).rawCategoryKey
              let index: UInt32
              if let previous, previous.rawKey == rawKey {
                index = previous.index
              } else {
                let key = AllocationCategoryKey(rawKey: rawKey)
                if let known = categoryIndex[key] {
                  index = known
                } else {
                  index = UInt32(namedCategories.count)
                  // A closure context's name already lists what it captures.
                  namedCategories.append(recording.category(for: key))
                  categoryIndex[key] = index
                }
              }
              guard let narrowed = Index(exactly: index) else { return false }
              categoryOf[node] = narrowed
              previous = (rawKey, index)
            }
            return true
          }
        }
      }
    }
    let nodeCategory = NodeCategories(nodeCount: nodeCount, narrow: { fill($0) }, wide: { fill($0) })
    // A constant from here on: the closures below read it for every node, and a captured
    // variable costs an exclusivity check per access.
    let categories = namedCategories

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
        case .strong where Self.numberTypeNames.contains(field.typeName): result[field.offset] = .notAReference
        case .strong: break
        }
      }
      ownershipCache[metadata] = result
      return result
    }
    var kinds = EdgeKinds(count: graph.edgeCount)
    for node in 0..<nodeCount {
      let range = Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
      if range.isEmpty { continue }
      let isClass = categories[nodeCategory[node]].kind == .swiftClass
      let fields = isClass ? ownership(metadata: block(node).metadata) : [:]
      for edge in range {
        let raw = graph.edgeOffset[edge]
        if raw & UInt32(CPerfHeapScan_EdgeWeak) != 0 {
          kinds[edge] = .weak
        } else if raw & UInt32(CPerfHeapScan_EdgeSideTable) != 0 {
          kinds[edge] = .sideTable
        } else if let kind = fields[Int(raw & UInt32(CPerfHeapScan_EdgeOffsetMask))] {
          kinds[edge] = kind
        }
      }
    }

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

    // libdispatch's cache of continuations it has run: stale contexts, not references.
    // Only the allocating frame is named, once per address: a check does this while the
    // scenario waits.
    var allocatorNames: [UInt: String] = [:]
    func allocator(_ node: Int) -> String? {
      guard let address = recording.stacks[block(node).stackID]?.first else { return nil }
      if let known = allocatorNames[address] { return known }
      let name = symbolizing.symbolize([address], symbolizer: symbolizer).first?.symbol ?? ""
      allocatorNames[address] = name
      return name
    }
    // A continuation is a plain block of its size class: only that category's nodes are
    // looked at (a closure call a node was 40 ms of a 16 M-object heap's check).
    let continuationCategory = AllocationCategoryKey(
      block: DispatchContinuationCache.continuationBytes, metadata: 0, isSwiftObject: false)
    let continuationCandidates = categoryIndex[continuationCategory].map { nodeCategory.nodes(in: Int($0)) } ?? []
    for edge in DispatchContinuationCache.staleEdges(
      graph: graph, candidates: continuationCandidates, block: block, allocator: allocator)
    {
      kinds[edge] = .notAReference
    }

    // Read only from here on: a constant is read without the exclusivity check each access
    // to a captured variable costs (most of a 16 M-block heap's reachability walk).
    let edgeKind = kinds

    // From the paths' walk, or made for markReachable's: one set, not one of each.
    var reachable = NodeSet(nodeCount: 0)
    func markReachable(from seeds: [UInt32]) {
      Self.markReachable(from: seeds, graph: graph, edgeKind: edgeKind, reachable: &reachable)
    }
    let rootNodes = graph.marks.withUnsafeBufferPointer { marks in
      (0..<nodeCount).filter {
        HeapGraph.isRoot(marks[$0]) || graph.isHolder($0) || HeapGraph.isFreed(marks[$0])
          || (!notJudged.isEmpty && notJudged.contains(block($0).address))
      }.map { UInt32($0) }
    }
    // With retainers described, their breadth-first walk from the roots is the walk for
    // reachability too: a big heap is walked once, not twice.
    // nil while every edge is strong: the walks then check no edge.
    let keepsAlive: ((Int) -> Bool)? = edgeKind.allStrong ? nil : { edgeKind[$0].keepsAlive }
    let paths = describesRetainers ? RetainerPaths(graph: graph, seeds: rootNodes, keepsAlive: keepsAlive) : nil
    if let paths {
      reachable = paths.reached
    } else {
      reachable = NodeSet(nodeCount: nodeCount)
      markReachable(from: rootNodes)
    }

    func typeName(_ node: Int) -> String { categories[nodeCategory[node]].name }

    // Suppressions: suppressed leaked blocks become roots.
    var suppressedCount = 0
    var suppressedBytes = 0
    do {
      let leakedBefore = reachable.missing(below: nodeCount).map { Int($0) }
      var seeds: [UInt32] = []
      for node in leakedBefore
      where suppressions.matches(type: typeName(node), stack: suppressions.needsStacks ? stackOf(node) : []) {
        seeds.append(UInt32(node))
      }
      markReachable(from: seeds)
      for node in leakedBefore where reachable[node] {
        suppressedCount += 1
        suppressedBytes += block(node).size
      }
    }

    var linker = DynamicLinkerBlocks()
    markReachable(
      from: reachable.missing(below: nodeCount).filter { node in
        recording.stacks[block(Int(node)).stackID]?.first.map { linker.contains($0) } == true
      })

    // Leaked nodes, compact numbering.
    let leaked = reachable.missing(below: nodeCount)
    func isCycleEdge(_ edge: Int) -> Bool { edgeKind[edge] == .strong }

    let components = stronglyConnectedComponents(
      leaked: leaked, graph: graph, reachable: reachable, isCycleEdge: isCycleEdge)
    // Per-node sets for the leaked nodes' analysis, empty when nothing leaked (a big heap
    // that is all reachable would hold them for nothing at its peak).
    let perLeakedNode = leaked.isEmpty ? 0 : nodeCount
    var inCycle = NodeSet(nodeCount: perLeakedNode)
    var cycleComponents: [[UInt32]] = []
    var memberOfComponent = NodeSet(nodeCount: perLeakedNode)
    for component in components {
      var isCycle = component.count > 1
      if component.count == 1 {
        let node = Int(component[0])
        for edge in Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
        where isCycleEdge(edge) && Int(graph.edgeTarget[edge]) == node {
          isCycle = true
        }
      }
      if isCycle { cycleComponents.append(component) }
    }
    // A component reads as its rings: its shortest cycle (what the developer must break,
    // e.g. a controller and the closure that captures it), and a ring through every other
    // link between two types inside it, so that a closure's self-loop never hides the
    // parent-child ring beside it. The other members are what those rings hold: indirect
    // leaks, never cycles or roots of their own.
    var cyclePaths: [(steps: [CyclePathStep], group: RingGroup)] = []
    for component in cycleComponents {
      let rings = ringsThroughEveryLink(
        in: component, graph: graph, isMember: &memberOfComponent, isCycleEdge: isCycleEdge, typeName: typeName)
      let group = RingGroup(blocks: component.count, hasMoreRings: rings.hasMore)
      for ring in rings.rings {
        for step in ring { inCycle.insert(step.node) }
        cyclePaths.append((ring, group))
      }
    }

    // Root vs indirect: referenced by another leaked block through an owning edge
    // (strong, or an object's side table)? `unowned` back references do not make their
    // target indirect.
    var referencedByLeaked = NodeSet(nodeCount: perLeakedNode)
    for node in leaked {
      for edge in Int(graph.edgeStart[Int(node)])..<Int(graph.edgeStart[Int(node) + 1])
      where edgeKind[edge] == .strong || edgeKind[edge] == .sideTable {
        let target = Int(graph.edgeTarget[edge])
        if target != Int(node) { referencedByLeaked.insert(target) }
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
    var namer = EdgeNamer(fieldReader: fieldReader, captureReader: ClosureCaptureReader())
    var cycleIndexBySignature: [String: Int] = [:]
    var cycles: [LeaksReport.Cycle] = []
    for (path, group) in cyclePaths {
      let members = path.map(\.node)
      var position: [Int: Int] = [:]
      for (index, node) in members.enumerated() { position[node] = index }
      func reportEdge(from node: Int, edge: Int, to index: Int) -> LeaksReport.Cycle.Edge {
        let offset = Int(graph.edgeOffset[edge] & UInt32(CPerfHeapScan_EdgeOffsetMask))
        return LeaksReport.Cycle.Edge(
          from: position[node]!, to: index, offset: offset,
          name: namer.name(
            for: block(node), category: categories[nodeCategory[node]], offset: offset, graph: graph, node: node),
          kind: edgeKind[edge] == .strong ? "strong" : "unowned")
      }
      // Every named reference between two consecutive members: a controller that holds its
      // loader both as `delegate` and through a closure stays in the cycle until both are
      // broken. Unnamed parallel words are left out (a conservative scan also finds stale ones).
      var edges: [LeaksReport.Cycle.Edge] = []
      var signatureSteps: [String] = []
      for (index, step) in path.enumerated() {
        let next = (index + 1) % path.count
        var stepEdges = [reportEdge(from: step.node, edge: step.edge, to: next)]
        for edge in Int(graph.edgeStart[step.node])..<Int(graph.edgeStart[step.node + 1])
        where edge != step.edge && isCycleEdge(edge) && Int(graph.edgeTarget[edge]) == path[next].node {
          let parallel = reportEdge(from: step.node, edge: edge, to: next)
          if let name = parallel.name, !stepEdges.contains(where: { $0.name == name }) {
            stepEdges.append(parallel)
          }
        }
        edges += stepEdges
        // Elements of a buffer are one reference whatever their index.
        signatureSteps.append(
          typeName(step.node) + "@" + stepEdges.map { $0.name ?? String($0.offset) }.joined(separator: "+"))
      }
      let signature = signatureSteps.joined(separator: ">")
      if let existing = cycleIndexBySignature[signature] {
        cycles[existing].instances += 1
        cycles[existing].note(group, ringBlocks: members.count)
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
        where edgeKind[edge].keepsAlive && edgeKind[edge] != .sideTable {
          let target = Int(graph.edgeTarget[edge])
          guard position[target] == nil, !reachable[target], let index = neighborIndex(target) else { continue }
          neighborEdges.append(reportEdge(from: node, edge: edge, to: index))
        }
      }
      cycleIndexBySignature[signature] = cycles.count
      var cycle = LeaksReport.Cycle(
        nodes: members.map {
          LeaksReport.Cycle.Node(type: typeName($0), bytes: block($0).size, allocationStack: stackOf($0))
        },
        edges: edges, instances: 1, neighbors: neighbors, neighborEdges: neighborEdges)
      cycle.note(group, ringBlocks: members.count)
      cycles.append(cycle)
    }
    cycles.sort { ($0.instances, $0.nodes.count) > ($1.instances, $1.nodes.count) }

    let retainers = paths.map { paths in
      describeRetainers(
        graph: graph, paths: paths, keepsAlive: keepsAlive, block: block,
        categories: categories, nodeCategories: nodeCategory, namer: &namer, symbolizer: symbolizer,
        allocatedBy: { node in stackOf(node).first.map { "\($0.symbol) [\($0.module)]" } })
    }

    return LeaksReport(
      leakedCount: leaked.count, leakedBytes: leakedBytes, rootLeaks: rootLeaks,
      indirectLeakCount: indirectCount, indirectLeakBytes: indirectBytes,
      indirectLeaks: indirectLeaks, cycles: cycles,
      unscannedThreads: graph.unscannedThreads, blockedThreads: graph.blockedThreads,
      threadsScanned: graph.threadsScanned,
      scanMilliseconds: Double(graph.scanNanoseconds) / 1e6, blocksScanned: nodeCount,
      holderCount: nodeCount - graph.recordedCount, scannerBytes: graph.scannerBytes,
      staleRootWords: graph.staleWords, nonReferenceWords: graph.layoutWords,
      taskAllocatorFreeWords: graph.taskSlabWords, blocksFreedBeforeScan: graph.freedBlocks,
      freesNotLogged: graph.freesNotLogged,
      edgeCount: graph.edgeCount,
      suppressedCount: suppressedCount, suppressedBytes: suppressedBytes, retainers: retainers)
  }

  /// Instances of a type whose paths are read.
  static let retainerInstanceLimit = 200
  /// Distinct paths kept per type.
  static let retainerPathLimit = 3

  /// Marks what `seeds` reach through edges that keep their target alive. Depth first with
  /// each node's next edge on the stack, not its unvisited targets: an array of millions of
  /// objects would otherwise put all of them on the stack at once (a big heap's peak).
  static func markReachable(
    from seeds: [UInt32], graph: HeapGraph, edgeKind: EdgeKinds, reachable: inout NodeSet
  ) {
    var stack: [(node: UInt32, nextEdge: UInt32)] = []
    reachable.withUnsafeMutableWords { reached in
      graph.edgeStart.withUnsafeBufferPointer { edgeStart in
        graph.edgeTarget.withUnsafeBufferPointer { edgeTarget in
          edgeKind.withUnsafeKinds { kinds in
            for seed in seeds where !reached.containsNode(Int(seed)) {
              reached.insertNode(Int(seed))
              stack.append((seed, edgeStart[Int(seed)]))
              while let top = stack.last {
                let end = edgeStart[Int(top.node) + 1]
                var edge = top.nextEdge
                while edge < end
                  && !((kinds?[Int(edge)].keepsAlive ?? true) && !reached.containsNode(Int(edgeTarget[Int(edge)])))
                {
                  edge += 1
                }
                if edge == end {
                  stack.removeLast()
                  continue
                }
                stack[stack.count - 1].nextEdge = edge + 1
                let target = edgeTarget[Int(edge)]
                reached.insertNode(Int(target))
                stack.append((target, edgeStart[Int(target)]))
              }
            }
          }
        }
      }
    }
  }

  /// The shortest paths from a root to the reachable instances of each Swift class and
  /// closure context allocated while recording.
  /// - Parameters:
  ///   - paths: the shortest paths from the roots.
  ///   - keepsAlive: the edges `paths` was walked over (nil: every edge).
  static func describeRetainers(
    graph: HeapGraph, paths: RetainerPaths, keepsAlive: ((Int) -> Bool)?, block: (Int) -> RecordedBlock,
    categories: [AllocationCategory], nodeCategories: NodeCategories, namer: inout EdgeNamer, symbolizer: Symbolizer?,
    allocatedBy: (Int) -> String? = { _ in nil }
  ) -> [LeaksReport.Retainers] {
    func category(_ node: Int) -> AllocationCategory { categories[nodeCategories[node]] }
    // Grouped by category index first: a lookup by name per node hashed a string for each
    // of a big heap's millions of blocks.
    let reported = categories.map { $0.kind == .swiftClass || $0.kind == .closureContext }
    // Per category, its count and its first nodes (all a type's paths are read from): a
    // list of every node was a big heap's peak memory.
    var countByCategory = [Int](repeating: 0, count: categories.count)
    var firstNodesByCategory = [[Int]](repeating: [], count: categories.count)
    for node in 0..<graph.nodeCount where !graph.isHolder(node) && paths.reached[node] {
      let index = nodeCategories[node]
      guard reported[index], !HeapGraph.isFreed(graph.marks[node]) else { continue }
      countByCategory[index] += 1
      if firstNodesByCategory[index].count < retainerInstanceLimit { firstNodesByCategory[index].append(node) }
    }
    var nodesByType: [String: (count: Int, first: [Int])] = [:]
    var isApp: [String: Bool] = [:]
    for (index, count) in countByCategory.enumerated() where count > 0 {
      let name = categories[index].name
      let first = firstNodesByCategory[index]
      if let earlier = nodesByType[name] {
        // Two categories of one name: the first nodes of both, in node order.
        nodesByType[name] = (
          earlier.count + count, Array((earlier.first + first).sorted().prefix(retainerInstanceLimit))
        )
      } else {
        nodesByType[name] = (count, first)
      }
      isApp[name] = categories[index].isApp
    }
    let types = nodesByType.keys.sorted {
      (isApp[$0] == true ? 0 : 1, -nodesByType[$0]!.count, $0) < (
        isApp[$1] == true ? 0 : 1, -nodesByType[$1]!.count, $1
      )
    }.prefix(LeaksReport.retainerTypeLimit)

    // Which node holds an address (holders are nodes too), by binary search in address order.
    func holderNode(containing address: UInt) -> Int? {
      var low = 0
      var high = graph.nodeCount
      while low < high {
        let middle = (low + high) / 2
        if block(middle).address <= address { low = middle + 1 } else { high = middle }
      }
      guard low > 0, address < block(low - 1).address + UInt(max(block(low - 1).size, 1)) else { return nil }
      return low - 1
    }
    var rootCache: [Int: LeaksReport.Retainers.Root] = [:]
    func root(of node: Int) -> LeaksReport.Retainers.Root {
      if let known = rootCache[node] { return known }
      let mark = graph.marks[node]
      let source = graph.rootSources[node] ?? 0
      var root: LeaksReport.Retainers.Root
      if graph.isHolder(node) {
        root = .init(kind: "older block", name: category(node).name)
      } else if source != 0, let holder = holderNode(containing: source), graph.isHolder(holder) {
        root = .init(kind: "older block", name: category(holder).name)
      } else if mark & UInt8(CPerfHeapScan_MarkGlobalRoot) != 0,
        mark & UInt8(CPerfHeapScan_MarkStackRoot) == 0 || (source != 0 && symbolizer?.globalName(at: source) != nil)
      {
        root = .init(kind: "global", name: source == 0 ? nil : symbolizer?.globalName(at: source))
      } else {
        root = .init(kind: "stack", name: nil)
      }
      rootCache[node] = root
      return root
    }

    var paths = paths
    paths.resolveLeaves(types.lazy.flatMap { nodesByType[$0]!.first }, keepsAlive: keepsAlive)
    var result: [LeaksReport.Retainers] = []
    for type in types {
      let nodes = nodesByType[type]!
      var byPath: [LeaksReport.Retainers.Path] = []
      var index: [String: Int] = [:]
      for node in nodes.first {
        let chain = paths.path(to: node)
        guard let first = chain.first else { continue }
        var steps: [LeaksReport.Retainers.Step] = []
        var previous: Int?
        for (step, edge) in chain {
          var reference: String?
          if let edge, let previous {
            let offset = Int(graph.edgeOffset[edge] & UInt32(CPerfHeapScan_EdgeOffsetMask))
            reference =
              namer.name(
                for: block(previous), category: category(previous), offset: offset, graph: graph, node: previous)
              ?? "+\(offset)"
          }
          // A C block on the path says who made it: the Swift types name themselves.
          let made = category(step).kind == .malloc ? allocatedBy(step) : nil
          steps.append(.init(type: category(step).name, reference: reference, allocatedBy: made))
          previous = step
        }
        let path = LeaksReport.Retainers.Path(root: root(of: first.node), steps: steps, instances: 1)
        let key = "\(path.root)|\(steps.map { "\($0.reference ?? "")>\($0.type)" })"
        if let known = index[key] {
          byPath[known].instances += 1
        } else {
          index[key] = byPath.count
          byPath.append(path)
        }
      }
      byPath.sort { ($0.instances, -$0.steps.count) > ($1.instances, -$1.steps.count) }
      result.append(
        LeaksReport.Retainers(
          type: type, instances: nodes.count, examined: nodes.first.count,
          paths: Array(byPath.prefix(retainerPathLimit))))
    }
    return result
  }

  /// One step of a reported cycle: a node and the edge to the next node.
  struct CyclePathStep {
    var node: Int
    var edge: Int
  }

  /// The shortest cycle through a strongly connected component, over `isCycleEdge` edges,
  /// rotated to start at its smallest type name; among cycles of equal length, the one
  /// whose type sequence sorts first. Breadth-first from each member (at most 64 of
  /// them, by type name then address: enough for the components a scenario leaks).
  static func shortestCycle(
    in component: [UInt32], graph: HeapGraph, isMember: inout NodeSet, isCycleEdge: (Int) -> Bool,
    typeName: (Int) -> String
  ) -> [CyclePathStep] {
    for node in component { isMember.insert(Int(node)) }
    defer { for node in component { isMember.remove(Int(node)) } }
    let starts = component.map { Int($0) }.sorted {
      (typeName($0), graph.blockIndex(of: $0)) < (typeName($1), graph.blockIndex(of: $1))
    }.prefix(64)
    var best: [CyclePathStep] = []
    var bestKey: [String] = []
    var parentEdge: [Int: Int] = [:]  // node -> edge that reached it
    for start in starts {
      parentEdge.removeAll(keepingCapacity: true)
      var frontier = [start]
      var closing: Int?
      search: while !frontier.isEmpty, best.isEmpty || parentEdge.count < component.count {
        var next: [Int] = []
        for node in frontier {
          // Lowest offset first: a deterministic choice between parallel edges.
          let range = Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
          for edge in range.sorted(by: { graph.edgeOffset[$0] < graph.edgeOffset[$1] }) where isCycleEdge(edge) {
            let target = Int(graph.edgeTarget[edge])
            guard isMember[target] else { continue }
            if target == start {
              closing = edge
              parentEdge[start] = edge
              frontier = [node]
              break search
            }
            if parentEdge[target] == nil {
              parentEdge[target] = edge
              next.append(target)
            }
          }
        }
        frontier = next
      }
      guard let closing else { continue }
      // Walk back from the closing edge's source to the start.
      var steps = [CyclePathStep(node: frontier[0], edge: closing)]
      var node = frontier[0]
      while node != start {
        let edge = parentEdge[node]!
        let source = Self.source(of: edge, graph: graph)
        steps.append(CyclePathStep(node: source, edge: edge))
        node = source
      }
      steps.reverse()
      if !best.isEmpty && steps.count > best.count { continue }
      let (rotated, key) = rotatedToSmallestType(steps, typeName: typeName)
      if best.isEmpty || rotated.count < best.count || key.lexicographicallyPrecedes(bestKey) {
        best = rotated
        bestKey = key
      }
    }
    return best
  }

  /// A ring rotated to start at its smallest type name (ties: the rotation whose sequence
  /// sorts first), so that one ring reads the same wherever it was entered; and that
  /// sequence of names.
  static func rotatedToSmallestType(_ steps: [CyclePathStep], typeName: (Int) -> String)
    -> (steps: [CyclePathStep], names: [String])
  {
    let names = steps.map { typeName($0.node) }
    var rotation = 0
    for candidate in 1..<max(steps.count, 1)
    where (names[candidate...] + names[..<candidate]).lexicographicallyPrecedes(
      names[rotation...] + names[..<rotation])
    {
      rotation = candidate
    }
    return (Array(steps[rotation...] + steps[..<rotation]), Array(names[rotation...] + names[..<rotation]))
  }

  /// The node an edge leaves (edges are stored grouped by source).
  static func source(of edge: Int, graph: HeapGraph) -> Int {
    var low = 0
    var high = graph.nodeCount - 1
    while low < high {
      let mid = (low + high + 1) / 2
      if Int(graph.edgeStart[mid]) <= edge { low = mid } else { high = mid - 1 }
    }
    return low
  }

  /// Tarjan's algorithm, iterative, over the leaked nodes and the edges `isCycleEdge`
  /// keeps. Returns every component (singletons included).
  static func stronglyConnectedComponents(
    leaked: [UInt32], graph: HeapGraph, reachable: NodeSet, isCycleEdge: (Int) -> Bool
  ) -> [[UInt32]] {
    guard !leaked.isEmpty else { return [] }
    let unvisited = UInt32.max
    // By the leaked nodes' own numbering: arrays as long as the heap were 9 bytes a node of
    // fresh pages (144 MB at 16 M blocks) for a handful of leaked ones. A node's number is
    // kept in a column the kernel zeroes, whose pages only the leaked nodes touch.
    let number = ZeroedColumn(count: graph.nodeCount)
    for (position, node) in leaked.enumerated() { number.values[Int(node)] = Int32(position) + 1 }
    func slot(_ node: Int) -> Int { Int(number.values[node]) - 1 }
    var index = [UInt32](repeating: unvisited, count: leaked.count)
    var lowLink = [UInt32](repeating: 0, count: leaked.count)
    var onStack = [Bool](repeating: false, count: leaked.count)
    var tarjanStack: [UInt32] = []
    // Call stack frames: (node, next edge to look at).
    var callStack: [(node: UInt32, edge: UInt32)] = []
    var counter: UInt32 = 0
    var components: [[UInt32]] = []
    for (rootSlot, root) in leaked.enumerated() where index[rootSlot] == unvisited {
      index[rootSlot] = counter
      lowLink[rootSlot] = counter
      counter += 1
      tarjanStack.append(root)
      onStack[rootSlot] = true
      callStack.append((root, graph.edgeStart[Int(root)]))
      while let frame = callStack.last {
        let node = Int(frame.node)
        let nodeSlot = slot(node)
        let end = graph.edgeStart[node + 1]
        var edge = frame.edge
        var descended = false
        while edge < end {
          let current = Int(edge)
          edge += 1
          guard isCycleEdge(current) else { continue }
          let target = Int(graph.edgeTarget[current])
          if reachable[target] { continue }
          let targetSlot = slot(target)
          if index[targetSlot] == unvisited {
            callStack[callStack.count - 1].edge = edge
            index[targetSlot] = counter
            lowLink[targetSlot] = counter
            counter += 1
            tarjanStack.append(UInt32(target))
            onStack[targetSlot] = true
            callStack.append((UInt32(target), graph.edgeStart[target]))
            descended = true
            break
          } else if onStack[targetSlot] {
            lowLink[nodeSlot] = min(lowLink[nodeSlot], index[targetSlot])
          }
        }
        if descended { continue }
        callStack.removeLast()
        if let parent = callStack.last {
          let parentSlot = slot(Int(parent.node))
          lowLink[parentSlot] = min(lowLink[parentSlot], lowLink[nodeSlot])
        }
        if lowLink[nodeSlot] == index[nodeSlot] {
          var component: [UInt32] = []
          while let member = tarjanStack.popLast() {
            onStack[slot(Int(member))] = false
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

/// Names the reference at `offset` of a block: the stored property of a class instance;
/// for a closure context "capture #k: Type" from its capture descriptor, else "capture #k"
/// (k from 1, by offset among the context's references).
struct EdgeNamer {
  var fieldReader: FieldLayoutReader
  var captureReader = ClosureCaptureReader()

  mutating func name(
    for block: RecordedBlock, category: AllocationCategory, offset: Int, graph: HeapGraph, node: Int
  ) -> String? {
    switch category.kind {
    case .swiftClass:
      if let field = fieldReader.field(ofClassMetadata: block.metadata, at: offset) { return field.name }
      // Past the stored properties: a tail-allocated element (array, dictionary storage).
      return fieldReader.fields(ofClassMetadata: block.metadata).isEmpty ? nil : "element"
    case .closureContext:
      if let captures = captureReader.captures(ofContextMetadata: block.metadata),
        let index = captures.firstIndex(where: { offset >= $0.offset && offset < $0.offset + max($0.size, 8) })
      {
        return "capture #\(index + 1)" + (captures[index].typeName.map { ": \($0)" } ?? "")
      }
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
