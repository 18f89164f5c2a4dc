// The recorder under stress, for Tests/PerfHarnessCLITests/RecorderStressTests.swift: sixteen
// threads allocating and freeing, short-lived threads created and exiting throughout, a
// thread that blocks SIGPROF, and forks, all while both instruments record. Every probe
// type's count is fixed by --iterations, so the test can ask for exact numbers.
import Foundation
import PerfHarness
import PerfHarnessCLI

#if canImport(Glibc)
  import Glibc
#endif

final class StressProbeKept { var value = 0 }
final class StressProbeDropped {
  var value = 0
  var other = 1
}
final class StressProbeEphemeral { var value = 0 }
final class StressProbeBlocked { var value = 0 }
final class StressProbeForkChild { var value = 0 }

/// The work each part does per iteration; RecorderStressTests derives its expectations
/// from the same numbers.
enum StressShape {
  static let workers = 16
  static let roundsPerIteration = 1_000
  static let droppedPerRound = 4
  static let keptEveryRounds = 8
  static let ephemeralThreadsPerIteration = 50
  static let objectsPerEphemeralThread = 10
  static let blockedPerIteration = 1_000
  static let blockedKeptEvery = 4
  static let forks = 5
  static let objectsPerForkChild = 1_000
}

struct StressFailure: Error, CustomStringConvertible {
  var description: String
}

/// Holds objects across threads.
final class KeptObjects: @unchecked Sendable {
  private let lock = NSLock()
  private var objects: [AnyObject] = []  // guarded by lock
  func add(_ more: [AnyObject]) { lock.withLock { objects.append(contentsOf: more) } }
}

final class ThreadBody: @unchecked Sendable {
  let run: @Sendable () -> Void
  init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}

/// A raw pthread, so that the test controls exactly when threads start and exit.
func spawn(_ body: @escaping @Sendable () -> Void) throws -> pthread_t {
  var thread = pthread_t()
  let context = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
  let rc = pthread_create(
    &thread, nil,
    { raw in
      Unmanaged<ThreadBody>.fromOpaque(raw!).takeRetainedValue().run()
      return nil
    }, context)
  guard rc == 0 else { throw StressFailure(description: "pthread_create failed: \(rc)") }
  return thread
}

/// A thread that has SIGPROF blocked from its first instruction (the mask is inherited), so
/// not one of its samples can be taken: the test checks that none is reported.
func spawnWithSIGPROFBlocked(_ body: @escaping @Sendable () -> Void) throws -> pthread_t {
  var blocked = sigset_t()
  var previous = sigset_t()
  sigemptyset(&blocked)
  sigaddset(&blocked, SIGPROF)
  pthread_sigmask(SIG_BLOCK, &blocked, &previous)
  defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
  return try spawn(body)
}

@inline(never)
func burn(_ rounds: Int) -> UInt64 {
  var x: UInt64 = 1
  for i in 0..<rounds { x = x &* 6_364_136_223_846_793_005 &+ UInt64(truncatingIfNeeded: i) }
  return x
}

@inline(never)
func allocatingWorker(rounds: Int, kept bin: KeptObjects) {
  var kept: [AnyObject] = []
  var dropped: [AnyObject] = []  // escaping, so the optimizer cannot stack-promote them
  for round in 0..<rounds {
    for _ in 0..<StressShape.droppedPerRound { dropped.append(StressProbeDropped()) }
    if dropped.count >= 64 { dropped.removeAll(keepingCapacity: true) }
    if round % StressShape.keptEveryRounds == 0 { kept.append(StressProbeKept()) }
    free(malloc(16 + (round % 300) * 8))
    var aligned: UnsafeMutableRawPointer?
    if posix_memalign(&aligned, 64, 200 + round % 64) == 0 { free(aligned) }
    free(realloc(calloc(4, 8), 4096))
    if round % 64 == 0 { _ = burn(2_000) }
  }
  dropped.removeAll()
  bin.add(kept)
}

/// Threads that live a moment each, one after another, for as long as the workers run.
@inline(never)
func spawnEphemeralThreads(count: Int) throws {
  for _ in 0..<count {
    let thread = try spawn {
      var objects: [StressProbeEphemeral] = []
      for _ in 0..<StressShape.objectsPerEphemeralThread { objects.append(StressProbeEphemeral()) }
      _ = burn(5_000)
      objects.removeAll()
    }
    pthread_join(thread, nil)
  }
}

/// Blocks SIGPROF for its whole life: the sampler's signals for it stay pending, and
/// nothing may wait for them.
@inline(never)
func allocateWithSIGPROFBlocked(count: Int, kept bin: KeptObjects) {
  // Named so the test can find it in the report (Glibc's module has no pthread_setname_np).
  let fd = open("/proc/thread-self/comm", O_WRONLY)
  if fd >= 0 {
    _ = "sigprof-blocked".withCString { write(fd, $0, strlen($0)) }
    close(fd)
  }
  var kept: [AnyObject] = []
  var dropped: [AnyObject] = []
  for index in 0..<count {
    let object = StressProbeBlocked()
    if index % StressShape.blockedKeptEvery == 0 { kept.append(object) } else { dropped.append(object) }
    if dropped.count >= 64 { dropped.removeAll(keepingCapacity: true) }
    _ = burn(500)
  }
  dropped.removeAll()
  bin.add(kept)
}

/// What the forked child does: allocate probes and plain blocks, and report whether it could.
@inline(never)
func allocateInForkChild() -> Bool {
  var objects: [StressProbeForkChild] = []
  for _ in 0..<StressShape.objectsPerForkChild { objects.append(StressProbeForkChild()) }
  free(malloc(1000))
  return objects.count == StressShape.objectsPerForkChild
}

/// Forks while the other threads allocate: the child must be able to allocate (no harness
/// lock left held by a thread that does not exist in it) and exit cleanly, and it records
/// nothing.
func forkAndWait() throws {
  let pid = fork()
  guard pid >= 0 else { throw StressFailure(description: "fork failed: \(errno)") }
  if pid == 0 { _exit(allocateInForkChild() ? 0 : 1) }
  // A child that deadlocks must fail the run, not hang it.
  let deadline = ContinuousClock.now + .seconds(30)
  var status: Int32 = 0
  while true {
    let done = waitpid(pid, &status, WNOHANG)
    if done == pid { break }
    if done < 0 && errno != EINTR { throw StressFailure(description: "waitpid failed: \(errno)") }
    if ContinuousClock.now > deadline {
      kill(pid, SIGKILL)
      _ = waitpid(pid, &status, 0)
      throw StressFailure(description: "the forked child hung for 30 s")
    }
    usleep(1_000)
  }
  guard status == 0 else { throw StressFailure(description: "the forked child exited with status \(status)") }
}

/// Kept until the process exits, so they are live (# Persistent) when recording stops.
let bin = KeptObjects()

let stress = Scenario(
  "recorder-stress", summary: "16 allocating threads, short-lived threads, a SIGPROF-blocking thread and forks",
  variants: [.starter], defaultIterations: 4
) { context in
  let iterations = context.iterations
  try context.step("stress") {
    var threads: [pthread_t] = []
    for _ in 0..<StressShape.workers {
      threads.append(
        try spawn { allocatingWorker(rounds: StressShape.roundsPerIteration * iterations, kept: bin) })
    }
    threads.append(
      try spawnWithSIGPROFBlocked {
        allocateWithSIGPROFBlocked(count: StressShape.blockedPerIteration * iterations, kept: bin)
      })
    let spawner = try spawn {
      try? spawnEphemeralThreads(count: StressShape.ephemeralThreadsPerIteration * iterations)
    }
    for _ in 0..<StressShape.forks {
      try forkAndWait()
      usleep(20_000)
    }
    for thread in threads + [spawner] { pthread_join(thread, nil) }
  }
}

// The Swift runtime guards each generic metadata cache with a mutex that fork() does not
// release: a child that instantiates metadata (Array<StressProbeForkChild>, its storage class)
// while some parent thread held that cache's lock waits forever (seen here with Array's cache,
// a few times in a hundred runs). That is the runtime's fork hazard, not the recorder's, so
// the child's types are instantiated once before any thread exists or recording starts.
_ = allocateInForkChild()

PerfHarnessCLI.main(scenarios: [stress])
