// Scenarios that go wrong on purpose, for the end-to-end robustness tests.
import AsyncChainCases
import Foundation
import PerfHarness
import PerfHarnessCLI

struct ScenarioFailure: Error, CustomStringConvertible {
  var description: String { "the fixture failed on purpose" }
}

/// The type the crash tests count: its instances stay live until the process dies.
final class SurvivingFixtureObject {
  let payload = [Int](repeating: 7, count: 16)
}

nonisolated(unsafe) var survivors: [SurvivingFixtureObject] = []

/// glibc's malloc_usable_size (malloc.h is not in Glibc's module).
@_silgen_name("malloc_usable_size") func usableSize(_ block: UnsafeMutableRawPointer) -> Int

/// How long the process `leaves-a-process` starts lives: an odd figure, so the test finds
/// it by its command line.
let orphanSleepSeconds = "117.25"

/// How long the two processes `hang-with-a-process` starts sleep: FIXTURE_SLEEP_SECONDS,
/// and that with a 1 appended. Tests find them by their command lines, so each test
/// passes its own figure.
let hangerSleepSeconds = ProcessInfo.processInfo.environment["FIXTURE_SLEEP_SECONDS"] ?? "118.25"

/// How many SurvivingFixtureObjects `recordBeforeTheCrash` keeps live.
let survivingCount = 250

@inline(never)
func burnCPU(milliseconds: Int) -> Int {
  let end = ContinuousClock.now + .milliseconds(milliseconds)
  var accumulator = 0
  while ContinuousClock.now < end {
    for value in 0..<10_000 { accumulator = accumulator &* 31 &+ value }
  }
  return accumulator
}

/// What a crashing fixture records before it crashes: two steps, live objects of a known
/// type and a generation mark, so that a test can find each in the partial report.
@MainActor
func recordBeforeTheCrash(_ context: ScenarioContext) {
  context.step("burn") { _ = burnCPU(milliseconds: 300) }
  context.step("allocate") { survivors = (0..<survivingCount).map { _ in SurvivingFixtureObject() } }
  context.markGeneration("before the crash")
}

/// Made before `pauses` stops recording; 60 of the 100 are freed while it is stopped, and
/// one is then held only by a SetUpHolder.
final class RecordedFixtureObject {
  let payload = [Int](repeating: 1, count: 4)
}

/// Made while `pauses` has recording stopped, on the main thread and on another: set-up.
final class SetUpFixtureObject {
  let payload = [Int](repeating: 2, count: 4)
}

/// Made while stopped, holding the only reference to an object the recording counted: the
/// leak scan must still see that reference.
final class SetUpHolder {
  let held: RecordedFixtureObject
  init(held: RecordedFixtureObject) { self.held = held }
}

nonisolated(unsafe) var setUpHolder: SetUpHolder?
nonisolated(unsafe) var recordedObjects: [RecordedFixtureObject] = []
nonisolated(unsafe) var setUpObjects: [SetUpFixtureObject] = []

/// Burns CPU while recording is stopped: no sample may name it.
@inline(never)
func burnWhileStopped() -> Int { burnCPU(milliseconds: 300) }

/// Made by the async fixture's child tasks, on the cooperative pool's threads.
final class AsyncFixtureObject: Sendable {
  let payload = 7
}

nonisolated(unsafe) var asyncSurvivors: [AsyncFixtureObject] = []

/// How many AsyncFixtureObjects each of the async fixture's child tasks makes.
let asyncObjectsPerTask = 25

@inline(never)
func crashWithFatalError() -> Never {
  fatalError("the fixture crashed on purpose")
}

@inline(never)
func crashWithNullDereference() {
  let pointer = UnsafeMutablePointer<Int>(bitPattern: 8)!
  pointer.pointee = 42
}

@inline(never)
func crashWithAbort() -> Never {
  abort()
}

@inline(never)
func spinForever() -> Never {
  var accumulator = 0
  while true { accumulator = burnCPU(milliseconds: 10) &+ accumulator }
}

let scenarios = [
  Scenario("fatal-error", summary: "calls fatalError after recording", variants: [.starter], defaultIterations: 1) {
    context in
    recordBeforeTheCrash(context)
    crashWithFatalError()
  },
  Scenario(
    "segfault", summary: "writes through a bad pointer after recording", variants: [.starter], defaultIterations: 1
  ) { context in
    recordBeforeTheCrash(context)
    crashWithNullDereference()
  },
  Scenario("abort", summary: "calls abort() after recording", variants: [.starter], defaultIterations: 1) { context in
    recordBeforeTheCrash(context)
    crashWithAbort()
  },
  Scenario(
    "prints-then-aborts", summary: "prints a line on stdout, then calls abort()", variants: [.starter],
    defaultIterations: 1
  ) { _ in
    print("stdout before the crash")
    fflush(nil)
    crashWithAbort()
  },
  Scenario("hang", summary: "spins forever after recording", variants: [.starter], defaultIterations: 1) { context in
    recordBeforeTheCrash(context)
    spinForever()
  },
  Scenario(
    "hang-with-a-process", summary: "starts two sleeping processes, then spins forever after recording",
    variants: [.starter], defaultIterations: 1
  ) { context in
    let sleeper = Process()
    sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
    sleeper.arguments = [hangerSleepSeconds]
    sleeper.standardOutput = FileHandle.nullDevice
    sleeper.standardError = FileHandle.nullDevice
    try sleeper.run()
    // Foundation's Process gave that one a process group of its own; system() forks, so
    // this one stays in the scenario's group.
    _ = system("/bin/sleep \(hangerSleepSeconds)1 >/dev/null 2>&1 &")
    recordBeforeTheCrash(context)
    print("hanging now")
    fflush(nil)
    spinForever()
  },
  Scenario(
    "floods-then-aborts", summary: "writes FIXTURE_FLOOD_MIB MiB (default 16) to stderr, then aborts",
    variants: [.starter], defaultIterations: 1
  ) { _ in
    let mebibytes = ProcessInfo.processInfo.environment["FIXTURE_FLOOD_MIB"].flatMap(Int.init) ?? 16
    // 64-byte lines, 1 MiB a block.
    let block = Data(String(repeating: String(repeating: "f", count: 63) + "\n", count: 16_384).utf8)
    for _ in 0..<mebibytes { FileHandle.standardError.write(block) }
    FileHandle.standardError.write(Data("the last line\n".utf8))
    crashWithAbort()
  },
  Scenario(
    "pauses", summary: "stops recording for set-up work (allocating, freeing, burning CPU), then records",
    variants: [.starter], defaultIterations: 1
  ) { context in
    recordedObjects = (0..<100).map { _ in RecordedFixtureObject() }
    context.stopRecording()
    setUpHolder = SetUpHolder(held: recordedObjects.removeLast())
    setUpObjects = (0..<200).map { _ in SetUpFixtureObject() }
    let done = DispatchSemaphore(value: 0)
    Thread {
      let made = (0..<50).map { _ in SetUpFixtureObject() }
      DispatchQueue.main.async { setUpObjects += made }
      done.signal()
    }.start()
    done.wait()
    recordedObjects.removeLast(60)
    _ = burnWhileStopped()
    try context.startRecording()
    context.step("measured") { _ = burnCPU(milliseconds: 200) }
  },
  Scenario("throws", summary: "throws an error", variants: [.starter], defaultIterations: 1) { _ in
    throw ScenarioFailure()
  },
  Scenario("async-work", summary: "awaits a sleep and a task group", variants: [.starter], defaultIterations: 4) {
    context in
    try await Task.sleep(for: .milliseconds(20))
    let made = await context.step("task group") {
      await withTaskGroup(of: [AsyncFixtureObject].self) { group in
        for _ in 0..<context.iterations {
          group.addTask { (0..<asyncObjectsPerTask).map { _ in AsyncFixtureObject() } }
        }
        var all: [AsyncFixtureObject] = []
        for await part in group { all += part }
        return all
      }
    }
    // Back on the main thread after the awaits, as main-actor code is in an app.
    dispatchPrecondition(condition: .onQueue(.main))
    asyncSurvivors = made
    context.markGeneration("after the group")
  },
  Scenario(
    "async-chain", summary: "an async chain whose innermost function burns CPU and yields", variants: [.starter],
    defaultIterations: 1
  ) { context in
    let result = await context.step("chain") { await AsyncChain.run(milliseconds: 300 * context.iterations) }
    if result == 42 { print("unlikely") }
  },
  Scenario("async-throws", summary: "throws after an await", variants: [.starter], defaultIterations: 1) { _ in
    try await Task.sleep(for: .milliseconds(5))
    throw ScenarioFailure()
  },
  Scenario(
    "leaves-a-process", summary: "starts a process that outlives it, holding its stderr", variants: [.starter],
    defaultIterations: 1
  ) { _ in
    let sleeper = Process()
    sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
    sleeper.arguments = [orphanSleepSeconds]
    sleeper.standardError = FileHandle.standardError
    // Its stdout would be the harness's stderr, which the test reads to the end.
    sleeper.standardOutput = FileHandle.nullDevice
    try sleeper.run()
  },
  Scenario(
    "prints", summary: "prints to stdout and stderr in turn, flushing each line", variants: [.starter],
    defaultIterations: 3
  ) { context in
    for index in 1...context.iterations {
      print("stdout line \(index)")
      fflush(nil)  // every output stream: stdout is a pipe here, so fully buffered
      FileHandle.standardError.write(Data("stderr line \(index)\n".utf8))
    }
  },
  Scenario(
    "realloc-usable-bytes", summary: "fills each block's usable bytes, reallocs it, checks them",
    variants: [.starter], defaultIterations: 1
  ) { context in
    try context.step("realloc") {
      for request in stride(from: 1, to: 600, by: 7) {
        var block = malloc(request)!.assumingMemoryBound(to: UInt8.self)
        let usable = usableSize(block)
        block.initialize(repeating: 0xAB, count: usable)
        block = realloc(block, usable * 3 + 100)!.assumingMemoryBound(to: UInt8.self)
        let kept = (0..<usable).allSatisfy { block[$0] == 0xAB }
        free(block)
        if !kept { throw ScenarioFailure() }
      }
    }
  },
  Scenario("completes", summary: "does a little work", variants: [.starter], defaultIterations: 1) { context in
    // Long enough for the Time Profiler to see it: reports read by the fuzzer need threads.
    context.step("work") {
      _ = (0..<1000).map { $0 * 2 }
      _ = burnCPU(milliseconds: 60)
    }
  },
]

/// Declarations the command line must refuse, added only when a test asks: a variant that
/// names a path, a name with a space, an empty name, a name used twice.
let badDeclarations =
  ProcessInfo.processInfo.environment["FIXTURE_BAD_DECLARATIONS"] == nil
  ? []
  : [
    Scenario("escapes", summary: "a variant naming a path", variants: [ScenarioVariant(rawValue: "../../tmp/x")]) { _ in
    },
    Scenario("Bad Name", summary: "a name with a capital and a space") { _ in },
    Scenario("", summary: "no name") { _ in },
    Scenario("completes", summary: "declared twice") { _ in },
  ]

PerfHarnessCLI.main(scenarios: scenarios + badDeclarations)
