import CPerfHeapScan

/// libdispatch keeps the continuations it has run in a per-thread cache (a list headed in
/// the thread's specific data, linked through `do_next` at +16, each with its place from
/// the tail, `dc_cache_cnt`, at +8) and does not clear them. A cached continuation still
/// names the context of the work it ran (`dc_ctxt`, +40): a job or block freed since,
/// whose address malloc may have handed to one of the program's objects. In the leaks
/// corpus's task-group shape that stale word kept one leaked cycle "reachable" in about one
/// run of 200. Such a continuation is free memory to libdispatch: only its link is followed.
enum DispatchContinuationCache {
  /// libdispatch's continuation size on 64-bit Linux, and the allocator's frame.
  static let continuationBytes = 64
  static let allocatorPrefix = "_dispatch_continuation_alloc"

  /// The nodes that are continuations in a thread's cache: a chain from a block only a
  /// thread's stack or specific data names, through +16, whose +8 words count down to 1
  /// at its tail (then a null link), no link named by a block other than a continuation.
  /// A continuation that a queue or a global names is work still to run, and keeps its
  /// context.
  /// `candidates`: the nodes that can be continuations (plain blocks in their size class),
  /// in order; every other node is passed over without a look.
  private static func cachedNodes(
    graph: HeapGraph, candidates: [Int], block: (Int) -> RecordedBlock, allocator: (Int) -> String?
  ) -> [Int] {
    let nodeCount = graph.nodeCount
    // Made at the first continuation: a heap without one (16 M objects) needs no array as
    // long as its nodes.
    var isContinuation: [Bool] = []
    for node in candidates where !graph.isHolder(node) && !HeapGraph.isFreed(graph.marks[node]) {
      let candidate = block(node)
      guard !candidate.isSwiftObject, candidate.size == continuationBytes, candidate.stackID != 0 else { continue }
      if allocator(node)?.hasPrefix(allocatorPrefix) == true {
        if isContinuation.isEmpty { isContinuation = [Bool](repeating: false, count: nodeCount) }
        isContinuation[node] = true
      }
    }
    guard !isContinuation.isEmpty else { return [] }
    // Whether anything but a continuation names each one (continuations' own words are as
    // stale as the contexts they hold: cached ones keep the links of earlier cache states).
    var namedOtherwise = [Bool](repeating: false, count: nodeCount)
    for source in 0..<nodeCount where !isContinuation[source] {
      for edge in Int(graph.edgeStart[source])..<Int(graph.edgeStart[source + 1]) {
        let target = Int(graph.edgeTarget[edge])
        if isContinuation[target] { namedOtherwise[target] = true }
      }
    }
    let stackOnly = UInt8(CPerfHeapScan_MarkStackRoot)
    let otherRoots = UInt8(CPerfHeapScan_MarkGlobalRoot) | UInt8(CPerfHeapScan_MarkHeldByHolder)
    var cached: [Int] = []
    for head in 0..<nodeCount where isContinuation[head] {
      let mark = graph.marks[head]
      guard mark & stackOnly != 0, mark & otherRoots == 0, !namedOtherwise[head] else { continue }
      // The chain, through each continuation's link to the next.
      var chain = [head]
      var seen: Set<Int> = [head]
      while let next = link(of: chain.last!, graph: graph, isContinuation: isContinuation), !seen.contains(next) {
        guard !namedOtherwise[next], graph.marks[next] & otherRoots == 0 else { break }
        chain.append(next)
        seen.insert(next)
      }
      // A cache counts down to 1 at its tail: anything else is not one.
      let counts = chain.map { cacheCount(block($0)) }
      guard counts == Array((1...chain.count).reversed()).map(Int32.init),
        link(of: chain.last!, graph: graph, isContinuation: isContinuation) == nil
      else { continue }
      cached += chain
    }
    return cached
  }

  /// The edges of the cached continuations that name nothing: all but their links (+16),
  /// and but those naming a block libdispatch copied. Such a block (a handler it has not
  /// released yet) is what a continuation's context names, and only a continuation cached
  /// before the release names it while the release is under way; a stale context names
  /// what malloc put at the freed job's address, the program's own blocks.
  static func staleEdges(
    graph: HeapGraph, candidates: [Int], block: (Int) -> RecordedBlock, allocator: (Int) -> String?
  ) -> [Int] {
    cachedNodes(graph: graph, candidates: candidates, block: block, allocator: allocator).flatMap { node in
      (Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])).filter { edge in
        graph.edgeOffset[edge] & UInt32(CPerfHeapScan_EdgeOffsetMask) != 16
          && allocator(Int(graph.edgeTarget[edge])) != "_Block_copy"
      }
    }
  }

  private static func link(of node: Int, graph: HeapGraph, isContinuation: [Bool]) -> Int? {
    for edge in Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1])
    where graph.edgeOffset[edge] & UInt32(CPerfHeapScan_EdgeOffsetMask) == 16 {
      let target = Int(graph.edgeTarget[edge])
      return isContinuation[target] ? target : nil
    }
    return nil
  }

  private static func cacheCount(_ block: RecordedBlock) -> Int32 {
    UnsafeRawPointer(bitPattern: block.address)!.load(fromByteOffset: 8, as: Int32.self)
  }
}
