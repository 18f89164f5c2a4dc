// The leaks corpus: small programs whose leaks (and non-leaks) are known, shared by the
// in-process corpus tests (debug) and the `perfharness-leak-corpus` executable, which runs
// each case as a scenario through the CLI (built in release by `make test`).
//
// Each case builds its objects in an @inline(never) function that returns nothing (no
// stack slot of the caller keeps them), with class names unique to the case.
import Foundation

// A two-object cycle.
public final class LeakTwoA {
  public var b: LeakTwoB?
  public init() {}
}
public final class LeakTwoB {
  public var a: LeakTwoA?
  public init() {}
}

// A closure capturing self strongly plus another capture, stored in a property.
public final class LeakClosureOwner {
  public var value = 0
  public var handler: (() -> Void)?
  public func setUp(other: LeakClosureOther) { handler = { self.value += other.amount } }
  public init() {}
}
public final class LeakClosureOther {
  public var amount = 1
  public init() {}
}

// A closure capturing only self (self is the context).
public final class LeakSelfOnlyOwner {
  public var value = 0
  public var handler: (() -> Void)?
  public func setUp() { handler = { self.value += 1 } }
  public init() {}
}

// A strong delegate cycle.
public protocol LeakStrongDelegate: AnyObject { func didFinish() }
public final class LeakDelegatingTask {
  public var delegate: LeakStrongDelegate?
  public init() {}
}
public final class LeakTaskController: LeakStrongDelegate {
  public var task = LeakDelegatingTask()
  public func didFinish() {}
  public init() {}
}

// A loader that holds its controller twice: as a strong delegate and through a closure
// that captures only the controller (whose context is the controller itself).
public final class LeakFeedLoader {
  public var delegate: LeakStrongDelegate?
  public var onRefresh: (() -> Void)?
  public init() {}
}
public final class LeakFeedController: LeakStrongDelegate {
  public var loader = LeakFeedLoader()
  public var refreshes = 0
  public func didFinish() {}
  public func setUp() {
    loader.delegate = self
    loader.onRefresh = { self.refreshes += 1 }
  }
  public init() {}
}

// [weak self], weak delegate, unowned: no cycles.
public final class LeakWeakSelfOwner {
  public var value = 0
  public var handler: (() -> Void)?
  public func setUp() { handler = { [weak self] in self?.value += 1 } }
  public init() {}
}
public protocol LeakWeakDelegateProtocol: AnyObject { func didFinish() }
public final class LeakWeakDelegatingTask {
  public weak var delegate: LeakWeakDelegateProtocol?
  public init() {}
}
public final class LeakWeakTaskController: LeakWeakDelegateProtocol {
  public var task = LeakWeakDelegatingTask()
  public func didFinish() {}
  public init() {}
}
public final class LeakCustomer {
  public var card: LeakCard?
  public init() {}
}
public final class LeakCard {
  public unowned let customer: LeakCustomer
  public init(customer: LeakCustomer) { self.customer = customer }
}
// Leaked on purpose, with a weak / unowned back reference: a root leak and an indirect
// leak, never a cycle.
public final class LeakWeakParent {
  public var child: LeakWeakChild?
  public init() {}
}
public final class LeakWeakChild {
  public weak var parent: LeakWeakParent?
  public init() {}
}
public final class LeakUnownedParent {
  public var child: LeakUnownedChild?
  public init() {}
}
public final class LeakUnownedChild {
  public unowned let parent: LeakUnownedParent
  public init(parent: LeakUnownedParent) { self.parent = parent }
}

// A root leak: the only pointer is dropped.
public final class LeakOrphan {
  public var payload = (1, 2, 3)
  public init() {}
}

// Reachable from globals: not leaks.
public final class LeakCachedItem {
  public var bytes = [UInt8](repeating: 1, count: 32)
  public init() {}
}
public enum LeakGlobalCache {
  nonisolated(unsafe) public static var items: [Int: LeakCachedItem] = [:]
}
public final class LeakGlobalCycleA {
  public var b: LeakGlobalCycleB?
  public init() {}
}
public final class LeakGlobalCycleB {
  public var a: LeakGlobalCycleA?
  public init() {}
}
public enum LeakGlobalCycleHolder {
  nonisolated(unsafe) public static var root: LeakGlobalCycleA?
}

// N identical cycles.
public final class LeakManyA {
  public var b: LeakManyB?
  public init() {}
}
public final class LeakManyB {
  public var a: LeakManyA?
  public init() {}
}

// A cycle whose only other "pointers" are stale words in a reused heap chunk.
public final class LeakStaleA {
  public var b: LeakStaleB?
  public init() {}
}
public final class LeakStaleB {
  public var a: LeakStaleA?
  public init() {}
}
public enum LeakStaleBuffer {
  nonisolated(unsafe) public static var kept: UnsafeMutableRawPointer?
}

// Cycles of objects whose size class a C table older than the recording points into with
// dangling pointers (`LeakCorpus.prepareDanglingPointers`). The payload gives them a size
// (136 bytes) that little else allocates, so glibc hands them the freed chunks.
public final class LeakDanglingA {
  public var b: LeakDanglingB?
  public var payload: (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int) = (
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
  )
  public init() {}
}
public final class LeakDanglingB {
  public var a: LeakDanglingA?
  public var payload: (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int) = (
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
  )
  public init() {}
}
public enum LeakDanglingTable {
  /// A C table (not a Swift object) reachable from a global.
  nonisolated(unsafe) public static var table: UnsafeMutablePointer<UInt>?
  public static let count = 7  // glibc's per-thread cache holds 7 chunks of a size
}

// One cycle per generation, checked at each mark.
public final class LeakCheckedA {
  public var b: LeakCheckedB?
  public init() {}
}
public final class LeakCheckedB {
  public var a: LeakCheckedA?
  public init() {}
}

// Suppressed.
public final class LeakSuppressedOrphan {
  public var value = 0
  public init() {}
}

// Held by another thread's stack while it is parked.
public final class LeakThreadHeld {
  public var value = 0
  public init() {}
}

public enum LeakCorpus {
  /// How many identical cycles `manyCycles` leaks.
  public static let manyCount = 25

  /// Allocates in a function of its own and returns the object: in release builds the
  /// optimizer would otherwise promote a case's objects that never escape the case to the
  /// stack (a cycle that never escapes is never on the heap, so never leaks).
  @inline(never) public static func make<T: AnyObject>(_ build: () -> T) -> T { build() }

  @inline(never) public static func twoObjectCycle() {
    let a = make(LeakTwoA.init)
    let b = make(LeakTwoB.init)
    a.b = b
    b.a = a
  }

  @inline(never) public static func closureWithOtherCapture() {
    let owner = LeakClosureOwner()
    owner.setUp(other: LeakClosureOther())
  }

  @inline(never) public static func selfOnlyClosure() {
    LeakSelfOnlyOwner().setUp()
  }

  @inline(never) public static func delegateCycle() {
    let controller = make(LeakTaskController.init)
    controller.task.delegate = controller
  }

  @inline(never) public static func delegateAndClosureCycle() {
    make(LeakFeedController.init).setUp()
  }

  @inline(never) public static func weakAndUnowned() {
    let owner = LeakWeakSelfOwner()
    owner.setUp()
    owner.handler?()
    let controller = LeakWeakTaskController()
    controller.task.delegate = controller
    let customer = LeakCustomer()
    customer.card = LeakCard(customer: customer)
  }

  @inline(never) public static func leakedWithWeakAndUnownedBackReferences() {
    let weakParent = make(LeakWeakParent.init)
    let weakChild = make(LeakWeakChild.init)
    weakParent.child = weakChild
    weakChild.parent = weakParent
    _ = Unmanaged.passRetained(weakParent)
    let unownedParent = make(LeakUnownedParent.init)
    unownedParent.child = LeakUnownedChild(parent: unownedParent)
    _ = Unmanaged.passRetained(unownedParent)
  }

  @inline(never) public static func orphan() {
    _ = Unmanaged.passRetained(make(LeakOrphan.init))
  }

  @inline(never) public static func globalCache() {
    for key in 0..<100 { LeakGlobalCache.items[key] = LeakCachedItem() }
  }

  @inline(never) public static func globalCycle() {
    let a = LeakGlobalCycleA()
    let b = LeakGlobalCycleB()
    a.b = b
    b.a = a
    LeakGlobalCycleHolder.root = a
  }

  @inline(never) public static func manyCycles() {
    for _ in 0..<manyCount {
      let a = make(LeakManyA.init)
      let b = make(LeakManyB.init)
      a.b = b
      b.a = a
    }
  }

  /// A reachable buffer from realloc(NULL, n) (a malloc in all but name) whose chunk held
  /// a freed buffer full of a leaked object's address: the bytes it never wrote are not
  /// pointers, so the cycle still leaks.
  @inline(never) public static func cycleBehindStaleWords() {
    let a = make(LeakStaleA.init)
    let b = make(LeakStaleB.init)
    a.b = b
    b.a = a
    let bytes = 4608
    guard let freed = malloc(bytes) else { return }
    let address = UInt(bitPattern: Unmanaged.passUnretained(a).toOpaque())
    for offset in stride(from: 0, to: bytes, by: 8) {
      freed.storeBytes(of: address, toByteOffset: offset, as: UInt.self)
    }
    // Read by the kernel: the optimizer may not drop the stores as dead before free.
    let devNull = open("/dev/null", O_WRONLY)
    _ = write(devNull, freed, bytes)
    close(devNull)
    free(freed)
    // Still nil, but not provably so: the optimizer turns a literal realloc(nil, n) into malloc(n).
    LeakStaleBuffer.kept = realloc(LeakStaleBuffer.kept, bytes)
  }

  /// Before the recording: a C table keeps the addresses of objects freed since, the
  /// size of `LeakDanglingA`. The next objects of that size get those chunks back, so
  /// unless the recording keeps its new blocks off them, the table's dangling words read
  /// as references to the case's cycles.
  @inline(never) public static func prepareDanglingPointers() {
    let table = UnsafeMutablePointer<UInt>.allocate(capacity: LeakDanglingTable.count)
    var objects: [LeakDanglingA] = []
    objects.reserveCapacity(LeakDanglingTable.count)
    for index in 0..<LeakDanglingTable.count {
      let object = make(LeakDanglingA.init)
      table[index] = UInt(bitPattern: Unmanaged.passUnretained(object).toOpaque())
      objects.append(object)
    }
    objects.removeAll()
    LeakDanglingTable.table = table
  }

  /// Three two-object cycles, allocated where the dangling table points if nothing stops it.
  @inline(never) public static func cyclesBehindDanglingPointers() {
    for _ in 0..<3 {
      let a = make(LeakDanglingA.init)
      let b = make(LeakDanglingB.init)
      a.b = b
      b.a = a
    }
  }

  @inline(never) public static func checkedCycle() {
    let a = make(LeakCheckedA.init)
    let b = make(LeakCheckedB.init)
    a.b = b
    b.a = a
  }

  @inline(never) public static func suppressedOrphan() {
    _ = Unmanaged.passRetained(make(LeakSuppressedOrphan.init))
  }
}

// One cycle per iteration, as a user's program makes them: an object holding a stored
// closure that captures the object and a value.
public final class LeakIterationOwner {
  public var total = 0
  public var onChange: ((Int) -> Void)?
  public init() {}
}

extension LeakCorpus {
  @inline(never) public static func iterationCycle(_ step: Int) {
    let owner = make(LeakIterationOwner.init)
    owner.onChange = { value in owner.total += value + step }
  }
}
