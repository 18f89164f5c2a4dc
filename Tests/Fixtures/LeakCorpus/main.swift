// `perfharness-leak-corpus`: the leaks corpus as scenarios, one case each, through the same
// CLI as `perfharness` (a child process per case, every block tracked from its start).
// `make test` builds it in release; LeakCorpusReleaseTests checks its verdicts, so the
// corpus has no false positive or negative in an optimized build either.
import Foundation
import LeakCorpusCases
import PerfHarness
import PerfHarnessCLI

func corpusCase(_ name: String, _ summary: String, _ body: @escaping @Sendable () -> Void) -> Scenario {
  Scenario(name, summary: summary, variants: [.starter], defaultIterations: 1) { _ in body() }
}

// Before any recording starts (in every case's process): a C table of dangling pointers.
LeakCorpus.prepareDanglingPointers()

// raw-buffers: RAW_BUFFERS_COUNT blocks (11) of RAW_BUFFERS_SIZE bytes (2500) lost. With
// RAW_BUFFERS_LIBRARY, a build of Tests/Fixtures/RawBuffersC/raw_buffers.c (cc with the flags
// under test, -DRAW_BUFFERS_LIBRARY) loses them as RAW_BUFFERS_SHAPE says (plain, rbp, rbx);
// without it, Swift does (RawBuffers.lose). The library is loaded here, before any recording:
// what ld.so allocates for it is no block of the scenario's.
let rawBuffersSettings = ProcessInfo.processInfo.environment
let rawBuffersCount = rawBuffersSettings["RAW_BUFFERS_COUNT"].flatMap { Int($0) } ?? 11
let rawBuffersSize = rawBuffersSettings["RAW_BUFFERS_SIZE"].flatMap { Int($0) } ?? 2500
let rawBuffersShape = rawBuffersSettings["RAW_BUFFERS_SHAPE"] ?? "plain"
typealias RawBuffersLose = @convention(c) (UnsafePointer<CChar>, Int32, Int, UInt) -> Int
let rawBuffersLose: RawBuffersLose? = rawBuffersSettings["RAW_BUFFERS_LIBRARY"].map { path in
  guard let library = dlopen(path, RTLD_NOW), let symbol = dlsym(library, "RawBuffers_lose") else {
    fatalError("RAW_BUFFERS_LIBRARY \(path): \(dlerror().map { String(cString: $0) } ?? "not loaded")")
  }
  return unsafeBitCast(symbol, to: RawBuffersLose.self)
}

let scenarios = [
  corpusCase("two-object-cycle", "A and B point at each other", LeakCorpus.twoObjectCycle),
  corpusCase(
    "closure-with-other-capture", "a stored closure captures self and another object",
    LeakCorpus.closureWithOtherCapture),
  corpusCase("self-only-closure", "a stored closure captures only self", LeakCorpus.selfOnlyClosure),
  corpusCase("delegate-cycle", "a task holds its controller as a strong delegate", LeakCorpus.delegateCycle),
  corpusCase(
    "delegate-and-closure-cycle", "a loader holds its controller as a delegate and through a closure",
    LeakCorpus.delegateAndClosureCycle),
  corpusCase("weak-and-unowned", "[weak self], a weak delegate, unowned: no leak", LeakCorpus.weakAndUnowned),
  corpusCase(
    "weak-and-unowned-back-references", "leaked parents with weak / unowned back references",
    LeakCorpus.leakedWithWeakAndUnownedBackReferences),
  corpusCase("root-leak", "the only pointer is dropped", LeakCorpus.orphan),
  corpusCase("global-cache", "a cache reachable from a global: no leak", LeakCorpus.globalCache),
  corpusCase("global-cycle", "a cycle reachable from a global: no leak", LeakCorpus.globalCycle),
  corpusCase(
    "cycle-behind-stale-words", "a reachable realloc'd buffer holds stale copies of a cycle's address",
    LeakCorpus.cycleBehindStaleWords),
  corpusCase(
    "cycles-behind-dangling-pointers", "a C table older than the recording points where the cycles get allocated",
    LeakCorpus.cyclesBehindDanglingPointers),
  corpusCase("many-cycles", "\(LeakCorpus.manyCount) identical two-object cycles", LeakCorpus.manyCycles),
  corpusCase("raw-buffers", "raw buffers lost (RAW_BUFFERS_COUNT, _SIZE; _LIBRARY, _SHAPE: from C)") {
    if let rawBuffersLose {
      _ = rawBuffersLose(rawBuffersShape, Int32(rawBuffersCount), rawBuffersSize, 20_000_000)
    } else {
      RawBuffers.lose(count: rawBuffersCount, size: rawBuffersSize)
    }
  },
  // A leak check before anything leaked, then one at each mark (--leak-check-at-marks); the
  // labels are heap strings (over 15 bytes), which must not read as leaks.
  Scenario(
    "cycles-checked-at-marks", summary: "one cycle per generation; checks see 0, 1, 2, 3",
    variants: [.starter], defaultIterations: 3
  ) { context in
    context.checkLeaks("before anything leaked")
    for index in 1...context.iterations {
      LeakCorpus.checkedCycle()
      context.markGeneration("after leaking cycle number \(index)")
    }
  },
  Scenario(
    "cycle-per-iteration", summary: "one closure cycle per iteration, a mark with a long label after each",
    variants: [.starter], defaultIterations: 10
  ) { context in
    for index in 1...context.iterations {
      context.step("make one cycle") { LeakCorpus.iterationCycle(index) }
      context.markGeneration("After iteration number \(index)")
    }
  },
]

/// A shape leaked once per iteration, with a step and a mark (a long label: a heap string
/// the harness keeps) between instances, as a program's drill-downs would.
func shapeCase(_ name: String, _ make: @escaping @Sendable (Int) -> Void) -> Scenario {
  Scenario(name, summary: "one \(name) leaked per iteration", variants: [.starter], defaultIterations: 10) {
    context in
    for index in 1...context.iterations {
      context.step("leak one \(name)") { make(index) }
      context.markGeneration("After leaking \(name) number \(index)")
    }
  }
}

let shapes = [
  shapeCase("shape-closure-capturing-self-and-value", LeakShapes.closureCapturingSelfAndValue),
  shapeCase("shape-closure-capturing-only-self", LeakShapes.closureCapturingOnlySelf),
  shapeCase("shape-closure-ring", LeakShapes.closureRing),
  shapeCase("shape-linked-nodes", LeakShapes.linkedNodes),
  shapeCase("shape-three-object-ring", LeakShapes.threeObjectRing),
  shapeCase("shape-strong-delegate", LeakShapes.strongDelegate),
  shapeCase("shape-array-of-closures", LeakShapes.arrayOfClosures),
  shapeCase("shape-overlapping-rings", LeakShapes.overlappingRings),
  shapeCase("shape-generic-handler", LeakShapes.genericHandler),
  Scenario(
    "shape-dispatch-workers", summary: "one closure cycle per iteration, made on Dispatch's worker threads",
    variants: [.starter], defaultIterations: 10
  ) { context in
    context.step("leak on the workers") { LeakShapes.cyclesOnDispatchWorkers(context.iterations) }
    context.markGeneration("After the workers leaked \(context.iterations) cycles")
  },
  Scenario(
    "shape-task-group", summary: "one linked-node cycle per iteration, made in a task group's child tasks",
    variants: [.starter], defaultIterations: 10
  ) { (context: ScenarioContext) async in
    await context.step("leak in child tasks") { await LeakShapes.cyclesInTaskGroup(context.iterations) }
    context.markGeneration("After the child tasks leaked \(context.iterations) cycles")
  },
]

PerfHarnessCLI.main(scenarios: scenarios + shapes)
