// Shapes of cycles that programs outside this project leak once per iteration: the corpus
// the leak scan must find in every run, whatever the instance count, the thread that made
// them, the build configuration or the instruments beside it. `perfharness-leak-corpus`
// runs each as a scenario; `perfharness-leak-corpus-runner` runs them many times and
// prints found/expected per shape.
import Dispatch

// A stored closure capturing self and a value: the context is a box of two captures.
public final class ShapeClosureOwner {
  public var total = 0
  public var action: (() -> Void)?
  public init() {}
}

// A stored closure capturing only self: the closure's context is the object itself.
public final class ShapeSelfClosure {
  public var fired = 0
  public var onFire: (() -> Void)?
  public init() {}
}

// Three objects around a ring of stored closures, each capturing the next and a value.
public final class ShapeStageA {
  public var next: (() -> Int)?
  public init() {}
}
public final class ShapeStageB {
  public var next: (() -> Int)?
  public init() {}
}
public final class ShapeStageC {
  public var next: (() -> Int)?
  public init() {}
}

// A linked list closed on itself.
public final class ShapeNode {
  public var next: ShapeNode?
  public var payload = 0
  public init() {}
}

// Three objects around a ring.
public final class ShapeRingA {
  public var b: ShapeRingB?
  public init() {}
}
public final class ShapeRingB {
  public var c: ShapeRingC?
  public init() {}
}
public final class ShapeRingC {
  public var a: ShapeRingA?
  public init() {}
}

// A strong delegate held through a protocol existential.
public protocol ShapeDelegate: AnyObject { func finished() }
public final class ShapeRequest {
  public var delegate: ShapeDelegate?
  public init() {}
}
public final class ShapeScreen: ShapeDelegate {
  public var request: ShapeRequest?
  public func finished() {}
  public init() {}
}

// A parent whose children point back at it, and whose stored closure captures only it.
public final class ShapeFamily {
  public var children: [ShapeChild] = []
  public var onChange: (() -> Void)?
  public var changes = 0
  public init() {}
}
public final class ShapeChild {
  public var parent: ShapeFamily?
  public init() {}
}

// An array of closures, each capturing self.
public final class ShapeHandlers {
  public var handlers: [() -> Void] = []
  public var count = 0
  public init() {}
}

// A route whose handler, wrapped by a protocol extension generic over the router's
// associated Context (as a web framework's router does), captures the route: the wrapping
// closure's context is generic, and its capture's type, `(ShapeRequest, Self.Context)
// async throws -> Output`, names an associated type the runtime can resolve only inside
// that generic environment.
public struct ShapeRequestContext { public init() {} }
public struct ShapeHTTPRequest { public var path = "/" }
public protocol ShapeResponder { associatedtype Context }
public final class ShapeRouter<Context>: ShapeResponder { public init() {} }
extension ShapeResponder {
  // Never specialized, in any build: the shape is the unspecialized generic context.
  @_semantics("optimize.sil.specialize.generic.never") @inline(never)
  public func wrap<Output>(
    _ handler: @escaping (ShapeHTTPRequest, Self.Context) async throws -> Output, context: Self.Context
  ) -> (ShapeHTTPRequest) async throws -> Output {
    { request in try await handler(request, context) }
  }
}
public final class ShapeRoute {
  public var responder: ((ShapeHTTPRequest) async throws -> String)?
  public var hits = 0
  public init() {}
}

public enum LeakShapes {
  /// What one instance of a shape leaks: its cycle, by its members' short type names
  /// (sorted; closure contexts as "closure context"), what the cycle holds (indirect leaks,
  /// by short type name), and its blocks in all.
  public struct Expectation: Sendable {
    public var scenario: String
    /// Its shortest ring's members.
    public var members: [String]
    /// The other rings of its group, each of which the developer must break too.
    public var otherRings: [[String]] = []
    public var indirect: [String] = []
    /// Blocks of one instance beyond its shortest ring and its indirect leaks: the other
    /// rings' own members.
    public var otherRingBlocks = 0
    public var blocksPerInstance: Int { members.count + indirect.count + otherRingBlocks }
  }

  /// Every shape, by the scenario `perfharness-leak-corpus` runs it as.
  public static let expectations: [Expectation] = [
    Expectation(
      scenario: "shape-closure-capturing-self-and-value", members: ["ShapeClosureOwner", "closure context"]),
    Expectation(scenario: "shape-closure-capturing-only-self", members: ["ShapeSelfClosure"]),
    Expectation(
      scenario: "shape-closure-ring",
      members: ["ShapeStageA", "ShapeStageB", "ShapeStageC", "closure context", "closure context", "closure context"]),
    Expectation(scenario: "shape-linked-nodes", members: ["ShapeNode", "ShapeNode"]),
    Expectation(scenario: "shape-three-object-ring", members: ["ShapeRingA", "ShapeRingB", "ShapeRingC"]),
    Expectation(scenario: "shape-strong-delegate", members: ["ShapeRequest", "ShapeScreen"]),
    // Two rings: the owner and its buffer (the second closure's context is the owner
    // itself), and through the first closure's context, which also captures the owner.
    Expectation(
      scenario: "shape-array-of-closures", members: ["ShapeHandlers", "_ContiguousArrayStorage"],
      otherRings: [["ShapeHandlers", "_ContiguousArrayStorage", "closure context"]], otherRingBlocks: 1),
    // The closure's self-loop is the shortest ring; the children's ring must be broken too.
    Expectation(
      scenario: "shape-overlapping-rings", members: ["ShapeFamily"],
      otherRings: [["ShapeChild", "ShapeFamily", "_ContiguousArrayStorage"]],
      indirect: ["ShapeChild", "ShapeChild"], otherRingBlocks: 2),
    Expectation(scenario: "shape-dispatch-workers", members: ["ShapeClosureOwner", "closure context"]),
    Expectation(scenario: "shape-task-group", members: ["ShapeNode", "ShapeNode"]),
    Expectation(
      scenario: "shape-generic-handler",
      members: ["ShapeRoute", "closure context", "closure context", "closure context"]),
  ]

  /// "Module.Type<Args>" → "Type"; "closure context (captures: …)" → "closure context".
  public static func shortTypeName(_ type: String) -> String {
    if type.hasPrefix("closure context") { return "closure context" }
    let base = type.split(separator: "<", maxSplits: 1).first.map(String.init) ?? type
    return base.split(separator: ".").last.map(String.init) ?? base
  }

  @inline(never) public static func closureCapturingSelfAndValue(_ step: Int) {
    let owner = LeakCorpus.make(ShapeClosureOwner.init)
    owner.action = { owner.total += step }
  }

  @inline(never) public static func genericHandler(_ step: Int) {
    let route = LeakCorpus.make(ShapeRoute.init)
    route.responder = ShapeRouter<ShapeRequestContext>().wrap(
      { request, _ in
        route.hits += step
        return request.path
      }, context: ShapeRequestContext())
  }

  @inline(never) public static func closureCapturingOnlySelf(_ step: Int) {
    let owner = LeakCorpus.make(ShapeSelfClosure.init)
    owner.onFire = { owner.fired += 1 }
  }

  @inline(never) public static func closureRing(_ step: Int) {
    let a = LeakCorpus.make(ShapeStageA.init)
    let b = LeakCorpus.make(ShapeStageB.init)
    let c = LeakCorpus.make(ShapeStageC.init)
    a.next = { (b.next?() ?? 0) + step }
    b.next = { (c.next?() ?? 0) + step }
    c.next = { (a.next == nil ? 0 : 1) + step }
  }

  @inline(never) public static func linkedNodes(_ step: Int) {
    let first = LeakCorpus.make(ShapeNode.init)
    let second = LeakCorpus.make(ShapeNode.init)
    first.next = second
    second.next = first
    first.payload = step
  }

  @inline(never) public static func threeObjectRing(_ step: Int) {
    let a = LeakCorpus.make(ShapeRingA.init)
    let b = LeakCorpus.make(ShapeRingB.init)
    let c = LeakCorpus.make(ShapeRingC.init)
    a.b = b
    b.c = c
    c.a = a
  }

  @inline(never) public static func strongDelegate(_ step: Int) {
    let screen = LeakCorpus.make(ShapeScreen.init)
    let request = LeakCorpus.make(ShapeRequest.init)
    screen.request = request
    request.delegate = screen
  }

  @inline(never) public static func overlappingRings(_ step: Int) {
    let family = LeakCorpus.make(ShapeFamily.init)
    family.onChange = { family.changes += 1 }
    for _ in 0..<3 {
      let child = LeakCorpus.make(ShapeChild.init)
      child.parent = family
      family.children.append(child)
    }
  }

  /// The shapes leaked one instance per call, by scenario name: for the scenarios and for
  /// programs that do not link perfharness (`record-target-swift --leak-shape`).
  public static let byScenario: [String: @Sendable (Int) -> Void] = [
    "shape-closure-capturing-self-and-value": closureCapturingSelfAndValue,
    "shape-closure-capturing-only-self": closureCapturingOnlySelf,
    "shape-closure-ring": closureRing,
    "shape-linked-nodes": linkedNodes,
    "shape-three-object-ring": threeObjectRing,
    "shape-strong-delegate": strongDelegate,
    "shape-array-of-closures": arrayOfClosures,
    "shape-overlapping-rings": overlappingRings,
    "shape-generic-handler": genericHandler,
  ]

  @inline(never) public static func arrayOfClosures(_ step: Int) {
    let owner = LeakCorpus.make(ShapeHandlers.init)
    owner.handlers.append { owner.count += step }
    owner.handlers.append { owner.count -= 1 }
  }

  /// `count` cycles made by Dispatch's worker threads, returning when all are made.
  @inline(never) public static func cyclesOnDispatchWorkers(_ count: Int) {
    let group = DispatchGroup()
    for step in 0..<count {
      DispatchQueue.global().async(group: group) { closureCapturingSelfAndValue(step) }
    }
    group.wait()
  }

  /// `count` cycles made by the child tasks of a task group (the cooperative pool's threads).
  public static func cyclesInTaskGroup(_ count: Int) async {
    await withTaskGroup(of: Void.self) { group in
      for step in 0..<count {
        group.addTask { linkedNodes(step) }
      }
    }
  }
}

// Not a leak: instances a global keeps alive, for "why is it still alive?".
public final class RetainedRecord {
  public var value = 0
  public init() {}
}
public enum RetainedRegistry {
  nonisolated(unsafe) public static var records: [RetainedRecord] = []

  /// Replaces the registry's buffer: it and its 100 records are allocated by the caller.
  @inline(never) public static func fill() {
    records = (0..<100).map { _ in RetainedRecord() }
  }
}

/// Raw heap buffers a program loses (`UnsafeMutableRawPointer.allocate`, malloc underneath):
/// root leaks, each a block of its own. Sizes of 16k + 1 to 16k + 8 bytes end inside the
/// header glibc puts before the next chunk (docs/heap-scan.md).
public enum RawBuffers {
  @inline(never) public static func lose(count: Int, size: Int) {
    for index in 0..<count {
      let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
      buffer.initializeMemory(as: UInt8.self, repeating: UInt8(truncatingIfNeeded: index + 1), count: size)
    }
  }
}
