/// The leaks instrument's results (the JSON report's `leaks` section), like macOS `leaks`
/// and memcheck: blocks allocated while recording and unreachable from any root (stacks,
/// registers, TLS, writable image segments) through strong references are leaked; among
/// them, the rings that pass every link of a strongly connected component are ROOT CYCLEs,
/// leaked blocks that no other leaked block references are root leaks, the rest are
/// indirect leaks.
public struct LeaksReport: Codable, Sendable, Equatable {
  /// Every leaked block: root leaks, cycle members and indirect leaks.
  public var leakedCount: Int
  public var leakedBytes: Int
  /// Leaked blocks not in a cycle and referenced by no other leaked block, by type.
  public var rootLeaks: [RootLeak]
  /// Leaked blocks referenced only from other leaked blocks (and not in a cycle).
  public var indirectLeakCount: Int
  public var indirectLeakBytes: Int
  /// The indirect leaks by type (same shape as `rootLeaks`).
  public var indirectLeaks: [RootLeak]
  /// Retain cycles among leaked blocks, identical ones merged (`instances`).
  public var cycles: [Cycle]
  /// Threads that did not park and whose stack could not be read.
  public var unscannedThreads: Int
  /// Threads that did not park (they block every signal) but wait in a system call: their
  /// stack was read from there, their registers were not.
  public var blockedThreads: Int?
  public var threadsScanned: Int
  /// The graph scan alone (threads parked).
  public var scanMilliseconds: Double
  /// Scan, classification and symbolization together.
  public var analysisMilliseconds: Double = 0
  /// Live blocks in the graph: allocated while recording and live at its end, plus the
  /// holders (older live blocks, when the process tracked every block from its start).
  public var blocksScanned: Int
  /// How many of `blocksScanned` are holders: scanned for what they keep alive, never reported.
  public var holderCount: Int?
  /// Memory the scanner mapped for the scan (block list, index, marks, edges).
  public var scannerBytes: Int?
  /// Words of older Swift objects (holders) not followed: they still held their value from
  /// when the recording started and named blocks allocated later (reused addresses, not
  /// references).
  public var staleRootWords: Int?
  /// Words naming a block that the type of the Swift object holding them says cannot hold
  /// a reference (padding, an enum's tag, a number-typed property), not followed.
  public var nonReferenceWords: Int?
  /// Words naming a block in the free part of a slab of Swift Concurrency's task allocator
  /// (past the slab's current offset: what frames popped since left there), not followed.
  public var taskAllocatorFreeWords: Int?
  /// Blocks freed between the listing and the scan (by the harness's own work after the
  /// stop, or the scenario's during a check), left out: their addresses may belong to other
  /// blocks by then.
  public var blocksFreedBeforeScan: Int?
  /// Frees in that time the log could not hold (0 normally): the blocks they freed may
  /// have been scanned as if still live.
  public var freesNotLogged: Int?
  /// What the recording did against dangling pointers older than it (nil without the
  /// snapshot): the addresses they named were kept off new blocks.
  public var danglingAddresses: DanglingAddresses?
  public var edgeCount: Int
  /// Leaked blocks that a suppression matched (with what they alone keep alive).
  public var suppressedCount: Int
  public var suppressedBytes: Int
  /// Leak checks made while the scenario ran (at marks with `--leak-check-at-marks`, or
  /// where the scenario called `checkLeaks`), in order. Nil when none was made.
  public var checks: [Check]?
  /// "Why is it still alive?": per Swift type with instances allocated while recording and
  /// still reachable at its end (the program's own types first), the shortest paths from a
  /// root to them. Nil in reports written before this key existed.
  public var retainers: [Retainers]? = nil

  /// The memory graph built in the middle of a run: what had leaked by then.
  public struct Check: Codable, Sendable, Equatable {
    public var label: String
    /// Generation marks made before the check.
    public var generation: Int
    /// Since the recording started.
    public var timeMilliseconds: Double
    public var leakedCount: Int
    public var leakedBytes: Int
    /// Cycles by their node types, with instances (no stacks or edges: the final report
    /// has those for whatever is still leaked at the end).
    public var cycles: [CycleCount]
    public var rootLeaks: [TypeCount]
    public var indirectLeakCount: Int
    public var blocksScanned: Int
    /// Blocks freed by other threads while the check ran: not judged.
    public var freedDuringCheck: Int
    public var unscannedThreads: Int
    public var blockedThreads: Int
    /// Listing, scanning and classifying (the scenario was paused that long).
    public var analysisMilliseconds: Double
  }

  /// Values that named freed heap memory in an older block or a global when the recording
  /// started: no block allocated while recording was allowed to cover one (a block
  /// glibc returned over one was held aside, unused, until the scan), so none of those
  /// words can read as a reference to a new block.
  public struct DanglingAddresses: Codable, Sendable, Equatable {
    public var reserved: Int
    public var blocksHeldAside: Int
    public var bytesHeldAside: Int
    /// Blocks handed out over a reserved address anyway (no room left to hold more).
    public var notAvoided: Int

    public init(reserved: Int, blocksHeldAside: Int, bytesHeldAside: Int, notAvoided: Int) {
      self.reserved = reserved
      self.blocksHeldAside = blocksHeldAside
      self.bytesHeldAside = bytesHeldAside
      self.notAvoided = notAvoided
    }
  }

  public struct CycleCount: Codable, Sendable, Equatable {
    public var types: [String]
    public var instances: Int
  }

  public struct TypeCount: Codable, Sendable, Equatable {
    public var type: String
    public var count: Int
    public var bytes: Int
  }

  public struct RootLeak: Codable, Sendable, Equatable {
    /// Module-qualified Swift type, "closure context (captures: A, B)", or "Malloc <size
    /// class>".
    public var type: String
    public var bytes: Int
    public var count: Int
    /// Allocation stack of one of them, leaf first (empty without stacks).
    public var allocationStack: [AllocationsReport.StackFrame]
  }

  public struct Cycle: Codable, Sendable, Equatable {
    public var nodes: [Node]
    public var edges: [Edge]
    /// How many identical cycles (same node types, same edges) leaked.
    public var instances: Int
    /// Leaked blocks around the cycle (what it references, what references it), for the
    /// graph rendering; `Edge.from`/`to` index `nodes` then `neighbors` (nodes.count + i).
    public var neighbors: [Node]
    public var neighborEdges: [Edge]
    /// The most blocks of a strongly connected group this ring was found in, when a group
    /// held more than the ring: its other members are held by the ring, or lie on the
    /// other rings listed for it. nil: the ring was the whole group.
    public var groupBlocks: Int?
    /// A group this ring was found in has more distinct rings than the analysis lists
    /// (``LeaksReport/ringLimit``): breaking the listed ones may not free it.
    public var groupHasMoreRings: Bool?

    public struct Node: Codable, Sendable, Equatable {
      public var type: String
      public var bytes: Int
      /// Leaf first; empty when recorded without stacks.
      public var allocationStack: [AllocationsReport.StackFrame]
    }

    public struct Edge: Codable, Sendable, Equatable {
      public var from: Int
      public var to: Int
      /// Byte offset of the reference inside `from`.
      public var offset: Int
      /// Stored property name, "capture #k" for a closure context, or nil.
      public var name: String?
      /// "strong" or "unowned" ("unowned" only where field metadata says so).
      public var kind: String
    }
  }

  /// How many rings the analysis lists for one strongly connected group of leaked blocks.
  public static let ringLimit = 16

  /// How many types a report keeps retainer paths for, the program's own first.
  public static let retainerTypeLimit = 50

  /// Root leaks and cycles whose types contain `text` (case-insensitive).
  public func cycles(containing type: String) -> [Cycle] {
    let needle = type.lowercased()
    return cycles.filter { cycle in cycle.nodes.contains { $0.type.lowercased().contains(needle) } }
  }

  /// A `leaks`-style text summary.
  public func textSummary() -> String {
    var lines: [String] = []
    lines.append(
      "Process: \(leakedCount) leaked blocks for \(leakedBytes) total leaked bytes "
        + "(\(blocksScanned) blocks scanned in \(Int(scanMilliseconds.rounded())) ms)")
    for cycle in cycles {
      let total = cycle.nodes.reduce(0) { $0 + $1.bytes }
      lines.append(
        "  \(cycle.instances) (\(total * cycle.instances) bytes) ROOT CYCLE"
          + (cycle.instances > 1 ? " x \(cycle.instances) instances" : "") + cycle.groupNote)
      for (index, node) in cycle.nodes.enumerated() {
        lines.append(
          "    [\(index)] <\(node.type) \(node.bytes) bytes>"
            + (node.allocationStack.programSite.map { " allocated at \($0)" } ?? ""))
        for edge in cycle.edges where edge.from == index {
          let label = edge.name.map { "\($0) " } ?? ""
          lines.append(
            "       \(label)+\(edge.offset) --> [\(edge.to)]" + (edge.kind == "strong" ? "" : " (\(edge.kind))"))
        }
      }
    }
    for leak in rootLeaks {
      lines.append(
        "  \(leak.count) (\(leak.bytes) bytes) ROOT LEAK: <\(leak.type)>"
          + (leak.allocationStack.programSite.map { " allocated at \($0)" } ?? ""))
    }
    if indirectLeakCount > 0 {
      lines.append("  \(indirectLeakCount) (\(indirectLeakBytes) bytes) indirect leaks")
    }
    if unscannedThreads > 0 {
      lines.append("  warning: \(unscannedThreads) threads did not stop; results may miss or invent leaks")
    }
    if let notAvoided = danglingAddresses?.notAvoided, notAvoided > 0 {
      lines.append(
        "  warning: \(notAvoided) new blocks got an address an older dangling pointer names; results may miss leaks")
    }
    if let freesNotLogged, freesNotLogged > 0 {
      lines.append(
        "  warning: \(freesNotLogged) frees before the scan were not logged; results may miss or invent leaks")
    }
    for check in checks ?? [] {
      let cycleInstances = check.cycles.reduce(0) { $0 + $1.instances }
      lines.append(
        "  check \"\(check.label)\" at \(Int(check.timeMilliseconds.rounded())) ms: \(check.leakedCount) leaked blocks, "
          + "\(check.leakedBytes) bytes, \(cycleInstances) cycle instances"
          + (check.freedDuringCheck > 0 ? " (\(check.freedDuringCheck) blocks freed meanwhile, not judged)" : ""))
    }
    return lines.joined(separator: "\n")
  }
}

extension LeaksReport.Cycle {
  /// ", in a group of N blocks" (and that it has more rings than listed), or "".
  public var groupNote: String {
    guard let groupBlocks else { return groupHasMoreRings == true ? ", its group has more rings than listed" : "" }
    return ", in a group of \(groupBlocks) blocks" + (groupHasMoreRings == true ? " with more rings than listed" : "")
  }

  /// Graphviz DOT for this cycle and its neighbourhood: cycle nodes bold, neighbours
  /// dashed, edges labelled with their field or capture name and offset.
  public func dot(title: String = "cycle") -> String {
    func quote(_ text: String) -> String {
      var escaped = "\""
      for character in text {
        if character == "\"" { escaped.append("\\") }
        escaped.append(character)
      }
      return escaped + "\""
    }
    var out = "digraph \(quote(title)) {\n"
    out += "  rankdir=LR;\n  node [shape=box, fontname=\"Helvetica\"];\n"
    if instances > 1 { out += "  label=\(quote("\(instances) instances\\l"));\n" }
    for (index, node) in nodes.enumerated() {
      out += "  n\(index) [label=\(quote("\(node.type)\\n\(node.bytes) bytes")), style=bold, color=red];\n"
    }
    for (index, node) in neighbors.enumerated() {
      out += "  n\(nodes.count + index) [label=\(quote("\(node.type)\\n\(node.bytes) bytes")), style=dashed];\n"
    }
    for edge in edges + neighborEdges {
      let label = (edge.name.map { "\($0) " } ?? "") + "+\(edge.offset)"
      let style = edge.kind == "strong" ? "" : ", style=dotted"
      let color = edge.from < nodes.count && edge.to < nodes.count ? ", color=red" : ""
      out += "  n\(edge.from) -> n\(edge.to) [label=\(quote(label))\(style)\(color)];\n"
    }
    out += "}\n"
    return out
  }
}
