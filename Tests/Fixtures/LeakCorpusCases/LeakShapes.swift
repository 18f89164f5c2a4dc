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

// An array of closures, each capturing self.
public final class ShapeHandlers {
  public var handlers: [() -> Void] = []
  public var count = 0
  public init() {}
}

public enum LeakShapes {
  /// What one instance of a shape leaks: its cycle, by its members' short type names
  /// (sorted; closure contexts as "closure context"), what the cycle holds (indirect leaks,
  /// by short type name), and its blocks in all.
  public struct Expectation: Sendable {
    public var scenario: String
    public var members: [String]
    public var indirect: [String] = []
    public var blocksPerInstance: Int { members.count + indirect.count }
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
    // The reported cycle is the component's shortest one (owner and its buffer, whose
    // second closure's context is the owner itself); the first closure's context, which
    // also captures the owner, is what that cycle holds.
    Expectation(
      scenario: "shape-array-of-closures", members: ["ShapeHandlers", "_ContiguousArrayStorage"],
      indirect: ["closure context"]),
    Expectation(scenario: "shape-dispatch-workers", members: ["ShapeClosureOwner", "closure context"]),
    Expectation(scenario: "shape-task-group", members: ["ShapeNode", "ShapeNode"]),
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
