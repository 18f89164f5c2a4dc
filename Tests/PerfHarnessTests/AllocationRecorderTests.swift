import CPerfAlloc
import Dispatch
import Foundation
import Synchronization
import Testing

@testable import PerfHarness

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

// Probe types: unique names, so other tests running in parallel threads (which allocate
// too, and are recorded as well) cannot disturb the counts checked here.
final class AllocProbeA { var value = 0 }
final class AllocProbeB {
  var value = 0
  var other = 1
}
final class AllocProbeThreadedKept { var value = 0 }
final class AllocProbeThreadedDropped { var value = 0 }
final class AllocProbeGeneration { var payload = (0, 0, 0, 0, 0, 0, 0, 0) }
final class AllocProbeBeforeStart { var value = 0 }
final class AllocProbeStack { var value = 0 }
final class AllocProbeLeft { var value = 0 }
final class AllocProbeRight { var value = 0 }
final class AllocProbeDeep { var value = 0 }
final class AllocProbeFork { var value = 0 }
final class AllocProbeGeneric<T> {
  var value: T
  init(_ value: T) { self.value = value }
}

final class AllocProbeListed { var value = 0 }
final class AllocProbeHandedOver { var value = 0 }
final class AllocProbeHandedKept { var value = 0 }
final class AllocProbeCrowd { var value = 0 }
final class AllocProbeCaptured { var value = 0 }
final class AllocProbeThreadChurn { var value = 0 }
/// What the churned threads keep alive (a global: a pthread start routine captures nothing).
let threadChurnBin = ProbeBin()

/// What one test thread hands to another: objects, and C blocks by address.
final class HandOff: @unchecked Sendable {
  private let lock = Mutex(())
  private var objects: [Int: [AnyObject]] = [:]  // guarded by lock
  private var blocks: [Int: [UInt]] = [:]
  private var movedBlocks: [Int: [UInt]] = [:]
  /// Sizes no other test allocates: a leftover block of these would be one of this test's.
  static func originalSize(_ round: Int, _ thread: Int, _ k: Int) -> Int {
    40_008 + 16 * (k + 100 * (thread + 4 * round))
  }
  static func movedSize(_ round: Int, _ thread: Int, _ k: Int) -> Int { 60_008 + 16 * (k + 100 * (thread + 4 * round)) }
  func put(_ thread: Int, objects: [AnyObject], blocks: [UInt]) {
    lock.withLock { _ in
      self.objects[thread] = objects
      self.blocks[thread] = blocks
    }
  }
  func take(_ thread: Int) -> ([AnyObject], [UInt]) {
    lock.withLock { _ in (objects.removeValue(forKey: thread) ?? [], blocks.removeValue(forKey: thread) ?? []) }
  }
  func putMoved(_ round: Int, _ thread: Int, _ blocks: [UInt]) {
    lock.withLock { _ in movedBlocks[round * 100 + thread] = blocks }
  }
  func moved(_ round: Int, _ thread: Int) -> [UInt] { lock.withLock { _ in movedBlocks[round * 100 + thread] ?? [] } }
}

/// Holds objects across threads (the recorder must see them allocated on many threads).
final class ProbeBin: @unchecked Sendable {
  private let lock = Mutex(())
  private var objects: [AnyObject] = []  // guarded by lock
  func add(_ more: [AnyObject]) { lock.withLock { _ in objects.append(contentsOf: more) } }
  func removeAll() { lock.withLock { _ in objects.removeAll() } }
}

// The recorder is process-wide (one session at a time), so everything that records
// lives in this one serialized suite.
extension ProcessWideRecording {
  @Suite(.serialized)
  struct AllocationRecorderTests {
    static func report(_ recording: AllocationRecording, symbolizer: Symbolizer? = nil) -> AllocationsReport {
      AllocationsAnalysis().report(from: recording, symbolizer: symbolizer)
    }

    static func category(_ report: AllocationsReport, _ type: Any.Type) -> AllocationsReport.Category? {
      report.category(named: _typeName(type, qualified: true))
    }

    typealias ThreadBody = @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer?

    /// Starts a thread through `create` that keeps 5 probe objects in threadChurnBin, and
    /// joins it.
    static func runChurnThread(_ create: (inout pthread_t, ThreadBody) -> Int32) {
      var thread = pthread_t()
      let started = create(&thread) { _ in
        threadChurnBin.add((0..<5).map { _ in AllocProbeThreadChurn() })
        return nil
      }
      #expect(started == 0)
      if started == 0 { pthread_join(thread, nil) }
    }

    /// Stops the recorder: the thread tables it used, the probe objects the threads left
    /// alive, and the blocks it lost.
    static func stopThreadChurn(_ recorder: AllocationRecorder) throws -> (tables: UInt32, kept: Int, lost: Int) {
      let recording = recorder.stop()
      var stats = CPerfAlloc_Stats()
      CPerfAlloc_stats(&stats)
      threadChurnBin.removeAll()
      let churn = try #require(Self.category(Self.report(recording), AllocProbeThreadChurn.self))
      return (stats.threadTables, churn.persistentCount, recording.lostBlocks)
    }

    /// 400 threads one after another (as a server or a test runner makes them): each
    /// thread's table of counts goes to the next thread when it ends, not at the next mark
    /// (there are 256), and what it counted stays counted.
    @Test func threadsThatEndHandTheirTablesOn() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      for _ in 0..<400 { Self.runChurnThread { pthread_create(&$0, nil, $1, nil) } }
      let (tables, kept, lost) = try Self.stopThreadChurn(recorder)
      #expect(tables < 64, "\(tables) tables for at most a few threads alive at once")
      #expect(kept == 2000)
      #expect(lost == 0)
    }

    /// Threads that end without passing through the sampler's pthread_create (libc's own, as
    /// a library that looks it up itself gets): their tables are handed on at the next mark.
    @Test func tablesOfThreadsThatEndUnseenAreHandedOnAtMarks() throws {
      typealias Create =
        @convention(c) (
          UnsafeMutablePointer<pthread_t>?, UnsafePointer<pthread_attr_t>?, ThreadBody, UnsafeMutableRawPointer?
        ) -> Int32
      let next = UnsafeMutableRawPointer(bitPattern: -1)  // RTLD_NEXT
      let symbol = try #require(dlsym(next, "pthread_create"))
      let libcCreate = unsafeBitCast(symbol, to: Create.self)
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      for index in 0..<60 {
        Self.runChurnThread { libcCreate(&$0, nil, $1, nil) }
        if index % 10 == 9 { recorder.markGeneration(label: "after \(index + 1)") }
      }
      let (tables, kept, _) = try Self.stopThreadChurn(recorder)
      #expect(tables < 30, "\(tables) tables for 60 threads, one alive at a time")
      #expect(kept == 300)
    }

    @Test func exactPersistentAndTransientCounts() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      var a: [AllocProbeA] = []
      var b: [AllocProbeB] = []
      for _ in 0..<1000 { a.append(AllocProbeA()) }
      for _ in 0..<300 { b.append(AllocProbeB()) }
      a.removeFirst(400)
      b.removeAll()
      let recording = recorder.stop()
      withExtendedLifetime(a) {}
      let report = Self.report(recording)

      let probeA = try #require(Self.category(report, AllocProbeA.self))
      #expect(probeA.persistentCount == 600)
      #expect(probeA.transientCount == 400)
      #expect(probeA.totalCount == 1000)
      #expect(probeA.kind == "swiftClass")
      #expect(probeA.persistentBytes == 600 * (probeA.totalBytes / 1000))
      let probeB = try #require(Self.category(report, AllocProbeB.self))
      #expect(probeB.persistentCount == 0)
      #expect(probeB.transientCount == 300)
      #expect(recording.swiftObjectSites >= 1)
      #expect(recording.lostBlocks == 0)
      // The filter is a case-insensitive substring match.
      let filtered = report.categories(matching: "allocprobe")
      #expect(filtered.contains { $0.name.hasSuffix("AllocProbeA") })
      #expect(filtered.allSatisfy { $0.name.lowercased().contains("allocprobe") })
      // Sorted by persistent bytes.
      #expect(report.categories.map(\.persistentBytes) == report.categories.map(\.persistentBytes).sorted(by: >))
    }

    /// The stop lists the blocks straight into the array that keeps them, or, when they do
    /// not fit there, into memory of the recorder's own, copied a chunk at a time, each
    /// chunk's pages given back as it is done: either way every block of a listing that spans
    /// many chunks is listed whole, none read from a page already given back.
    /// Listed into the array, its pages are also populated ahead on a second thread when
    /// the listing is big (here: whatever its size).
    @Test(arguments: [(false, false), (true, false), (false, true)])
    func aListingOfManyChunksIsListedWhole(copied: Bool, populatedAhead: Bool) throws {
      let room = AllocationRecorder.listingRoom
      if copied { AllocationRecorder.listingRoom = { _ in 0 } }
      defer { AllocationRecorder.listingRoom = room }
      let threshold = CPerfAlloc_setPopulateAheadBytes(populatedAhead ? 0 : UInt64.max)
      defer { CPerfAlloc_setPopulateAheadBytes(threshold) }
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      let kept = (0..<300_000).map { _ in AllocProbeListed() }
      let recording = recorder.stop()
      let addresses = Set(kept.map { UInt(bitPattern: Unmanaged.passUnretained($0).toOpaque()) })
      withExtendedLifetime(kept) {}
      let listed = recording.liveBlocks.filter { addresses.contains($0.address) }
      #expect(listed.count == kept.count)
      #expect(listed.allSatisfy { $0.isSwiftObject && $0.metadata != 0 && $0.size > 0 })
      // A block read from a page given back would read as zeros.
      #expect(recording.liveBlocks.allSatisfy { $0.address != 0 })
      let probe = try #require(Self.category(Self.report(recording), AllocProbeListed.self))
      #expect(probe.persistentCount == kept.count)
    }

    /// A closure's context is named by what it captures, read from its capture descriptor,
    /// and counted like any type.
    @Test func closureContextsNameWhatTheyCapture() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      var kept: [() -> Int] = []
      var dropped: [() -> Int] = []
      for index in 0..<50 {
        let closure = Self.capturing(AllocProbeCaptured(), index)
        if index < 30 { kept.append(closure) } else { dropped.append(closure) }
        // A generic capture: its type needs the context's bindings, which metadata lacks.
        let generic = Self.capturing(AllocProbeCaptured(), generic: index)
        if index < 17 { kept.append(generic) } else { dropped.append(generic) }
      }
      dropped.removeAll()
      let recording = recorder.stop()
      withExtendedLifetime(kept) {}
      let report = Self.report(recording)
      let contexts = report.categories(matching: "AllocProbeCaptured").filter { $0.kind == "closureContext" }
        .sorted { $0.persistentCount > $1.persistentCount }
      #expect(
        contexts.map(\.name) == [
          "closure context (captures: PerfHarnessTests.AllocProbeCaptured, Swift.Int)",
          "closure context (captures: PerfHarnessTests.AllocProbeCaptured, …)",
        ])
      #expect(contexts.map(\.persistentCount) == [30, 17])
      #expect(contexts.map(\.transientCount) == [20, 33])
      #expect(report.categories(under: "closure context").filter { $0.name.contains("AllocProbeCaptured") }.count == 2)
    }

    @inline(never) static func capturing(_ probe: AllocProbeCaptured, _ index: Int) -> () -> Int {
      { probe.value + index }
    }

    @inline(never) static func capturing<T>(_ probe: AllocProbeCaptured, generic value: T) -> () -> Int {
      { probe.value + (value is Int ? 1 : 0) }
    }

    /// The harness's own objects made while recording (the recorder, step timings, marks)
    /// are not the scenario's: a scenario that allocates nothing leaves nothing of
    /// PerfHarness allocated below this test. (Blocks allocated elsewhere are other tests'.)
    @MainActor @Test func harnessObjectsAreNotCountedAsTheScenarios() throws {
      let recording = Recording(configuration: RecordingConfiguration(instruments: [.allocations]))
      let context = ScenarioContext(variant: .starter, iterations: 1, recording: recording)
      try recording.start()
      // What the test itself keeps, found below it: the filter's control.
      var control: [AllocProbeListed] = []
      for index in 0..<20 {
        context.step("step \(index)") {}
        context.markGeneration("mark \(index)")
        control.append(AllocProbeListed())
      }
      recording.finish()
      withExtendedLifetime(control) {}
      let allocations = try #require(recording.allocationRecording)
      // Blocks allocated below this test, by their allocation stacks (full stacks, the
      // default): the harness's objects would be, through its steps and marks.
      let symbolizer = try Symbolizer()
      let analysis = AllocationsAnalysis()
      var belowThisTest: [UInt32: Bool] = [:]
      let names = allocations.liveBlocks.filter { block in
        guard let frames = allocations.stacks[block.stackID] else { return false }
        if let known = belowThisTest[block.stackID] { return known }
        let below = analysis.symbolize(frames, symbolizer: symbolizer).contains {
          $0.symbol.contains("harnessObjectsAreNotCountedAsTheScenarios")
        }
        belowThisTest[block.stackID] = below
        return below
      }.map { allocations.category(for: $0.categoryKey).name }
      #expect(names.filter { $0.hasSuffix("AllocProbeListed") }.count == 20, "\(names)")
      let harnessCategories = names.filter { $0.contains("PerfHarness") && !$0.contains("PerfHarnessTests") }
      #expect(harnessCategories.isEmpty, "\(harnessCategories)")
      #expect(context.steps.count == 20)
      #expect(allocations.marks.count == 20)
    }

    @Test func genericClassNamesIncludeArguments() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      let kept = (0..<7).map { AllocProbeGeneric<Int>($0) }
      let dropped = (0..<3).map { AllocProbeGeneric<String>("\($0)") }
      _ = dropped.count
      let recording = recorder.stop()
      withExtendedLifetime(kept) {}
      let report = Self.report(recording)
      let ints = try #require(report.categories.first { $0.name.hasSuffix("AllocProbeGeneric<Swift.Int>") })
      #expect(ints.persistentCount == 7 && ints.transientCount == 0)
      let strings = try #require(report.categories.first { $0.name.hasSuffix("AllocProbeGeneric<Swift.String>") })
      #expect(strings.persistentCount + strings.transientCount == 3)
      #expect(!report.categories.contains { $0.kind == "unknownSwiftObject" })
    }

    @Test func exactCountsUnderEightThreads() throws {
      let bin = ProbeBin()
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      // Eight real threads: concurrentPerform may run every iteration on one busy thread.
      let finished = DispatchGroup()
      for thread in 0..<8 {
        finished.enter()
        Thread {
          defer { finished.leave() }
          var kept: [AnyObject] = []
          var dropped: [AnyObject] = []  // escaping, so release builds cannot stack-promote them
          for i in 0..<5000 {
            dropped.append(AllocProbeThreadedDropped())
            if dropped.count == 64 { dropped.removeAll(keepingCapacity: true) }
            if i % 5 == 0 { kept.append(AllocProbeThreadedKept()) }
            // Plain mallocs of several sizes, freed, on every thread too.
            let bytes = malloc(16 + (i % 200) * 8)
            free(bytes)
          }
          _ = thread
          dropped.removeAll()
          bin.add(kept)
        }.start()
      }
      finished.wait()
      let recording = recorder.stop()
      let report = Self.report(recording)
      bin.removeAll()
      let kept = try #require(Self.category(report, AllocProbeThreadedKept.self))
      #expect(kept.persistentCount == 8 * 1000)
      #expect(kept.transientCount == 0)
      let dropped = try #require(Self.category(report, AllocProbeThreadedDropped.self))
      #expect(dropped.persistentCount == 0)
      #expect(dropped.transientCount == 8 * 5000)
      #expect(recording.lostBlocks == 0 && recording.lostStacks == 0)
    }

    /// pprof's alloc_objects/alloc_space and the total-bytes views: every allocation under
    /// its stack, freed or kept, whichever thread's table counted it.
    @Test func totalsByStackCountEveryAllocation() throws {
      let bin = ProbeBin()
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      let finished = DispatchGroup()
      for _ in 0..<4 {
        finished.enter()
        Thread {
          defer { finished.leave() }
          var kept: [AnyObject] = []
          var dropped: [AnyObject] = []
          for i in 0..<3000 {
            dropped.append(AllocProbeThreadedDropped())
            // Thousands of blocks alive at once per thread, some freed in runs.
            if dropped.count == 1500 { dropped.removeAll(keepingCapacity: true) }
            if i % 3 == 0 { kept.append(AllocProbeThreadedKept()) }
          }
          dropped.removeAll()
          bin.add(kept)
        }.start()
      }
      finished.wait()
      let recording = recorder.stop()
      let report = Self.report(recording, symbolizer: try Symbolizer())
      bin.removeAll()
      func sum(_ stacks: [(count: Int, frames: [Int])], _ type: String) -> Int {
        stacks.filter { report.frames(at: $0.frames).contains { $0.symbol.contains(type) } }.reduce(0) { $0 + $1.count }
      }
      let totals = (report.totalStacks ?? []).map { (count: $0.count, frames: $0.frames) }
      let persistent = (report.persistentStacks ?? []).map { (count: $0.count, frames: $0.frames) }
      #expect(sum(totals, "AllocProbeThreadedDropped") == 4 * 3000)
      #expect(sum(totals, "AllocProbeThreadedKept") == 4 * 1000)
      #expect(sum(persistent, "AllocProbeThreadedKept") == 4 * 1000)
      #expect(sum(persistent, "AllocProbeThreadedDropped") == 0)
      #expect(report.lost.stackTotals == 0)
    }

    /// Objects and C blocks freed, or reallocated, on other threads than the ones that
    /// allocated them (gone by then), with and without marks taken meanwhile: still
    /// matched exactly.
    @Test func blocksFreedOnOtherThreadsAreMatched() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      let threads = 4
      let handOff = HandOff()
      let kept = ProbeBin()
      func startThreads(_ body: @escaping @Sendable (Int) -> Void) -> DispatchGroup {
        let finished = DispatchGroup()
        for index in 0..<threads {
          finished.enter()
          Thread {
            defer { finished.leave() }
            body(index)
          }.start()
        }
        return finished
      }
      // Blocks freed by threads other than theirs; in the second round, marks hold the
      // tables meanwhile.
      for round in 0..<2 {
        startThreads { index in
          var objects: [AnyObject] = []
          var keep: [AnyObject] = []
          for i in 0..<600 {
            objects.append(AllocProbeHandedOver())
            if i % 6 == 0 { keep.append(AllocProbeHandedKept()) }
          }
          let blocks = (0..<100).map { UInt(bitPattern: malloc(HandOff.originalSize(round, index, $0))) }
          handOff.put(index, objects: objects, blocks: blocks)
          kept.add(keep)
        }.wait()
        let consumers = startThreads { index in
          let (objects, blocks) = handOff.take((index + 1) % threads)
          withExtendedLifetime(objects) {}
          let moved = blocks.enumerated().map { k, block in
            UInt(bitPattern: realloc(UnsafeMutableRawPointer(bitPattern: block), HandOff.movedSize(round, index, k)))
          }
          handOff.putMoved(round, index, moved)
        }
        for mark in 0..<(round == 1 ? 5 : 0) {
          recorder.markGeneration(label: "mark \(mark)")
          usleep(200)
        }
        consumers.wait()
      }
      let recording = recorder.stop()
      let report = Self.report(recording)
      kept.removeAll()

      let handedOver = try #require(Self.category(report, AllocProbeHandedOver.self))
      #expect(handedOver.persistentCount == 0)
      #expect(handedOver.transientCount == 2 * threads * 600)
      let handedKept = try #require(Self.category(report, AllocProbeHandedKept.self))
      #expect(handedKept.persistentCount == 2 * threads * 100)
      #expect(handedKept.transientCount == 0)
      // Every block is live at its new address and size; none at its old size.
      let live = Set(recording.liveBlocks.map { "\($0.address) \($0.size)" })
      let liveSizes = Set(recording.liveBlocks.map(\.size))
      var notLive: [String] = []
      var leftOver: [Int] = []
      for round in 0..<2 {
        for index in 0..<threads {
          for (k, block) in handOff.moved(round, index).enumerated() {
            let expected = "\(block) \(HandOff.movedSize(round, index, k))"
            if !live.contains(expected) { notLive.append(expected) }
            if liveSizes.contains(HandOff.originalSize(round, index, k)) {
              leftOver.append(HandOff.originalSize(round, index, k))
            }
            free(UnsafeMutableRawPointer(bitPattern: block))
          }
        }
      }
      #expect(
        notLive.isEmpty && leftOver.isEmpty,
        "not live: \(notLive.prefix(5)); left at the old size: \(leftOver.prefix(5))")
      #expect(recording.lostBlocks == 0)
    }

    /// More threads alive at once than there are per-thread tables: the threads left
    /// without one free blocks that others' tables hold, and each is counted once.
    @Test func moreThreadsThanTablesAreCountedExactly() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      let threads = 300
      let handOff = HandOff()
      let allAllocated = DispatchGroup()
      let finished = DispatchGroup()
      let go = DispatchSemaphore(value: 0)
      for index in 0..<threads {
        allAllocated.enter()
        finished.enter()
        Thread {
          var own: [AnyObject] = (0..<20).map { _ in AllocProbeCrowd() }
          handOff.put(index, objects: Array(own[10...]), blocks: [])
          own.removeLast(10)
          allAllocated.leave()
          go.wait()  // every thread is alive (and has its table, or none) until here
          do {
            // Freed before the thread says it is done (by the end of this block).
            let (theirs, _) = handOff.take((index + 1) % threads)
            withExtendedLifetime(theirs) {}
          }
          own.removeAll()
          finished.leave()
        }.start()
      }
      allAllocated.wait()
      for _ in 0..<threads { go.signal() }
      finished.wait()
      let recording = recorder.stop()
      let crowd = try #require(Self.category(Self.report(recording), AllocProbeCrowd.self))
      #expect(crowd.persistentCount == 0)
      #expect(crowd.transientCount == threads * 20)
      #expect(recording.lostBlocks == 0)
    }

    /// Allocates through every malloc-family function with distinctive sizes.
    @inline(never)
    static func allocateThroughEveryFunction() -> [String: UnsafeMutableRawPointer] {
      var blocks: [String: UnsafeMutableRawPointer] = [:]
      blocks["malloc"] = malloc(123_457)!
      let zeroed = calloc(1, 123_458)!
      #expect(zeroed.load(fromByteOffset: 123_000, as: UInt8.self) == 0)
      blocks["calloc"] = zeroed
      blocks["reallocNull"] = realloc(nil, 123_459)!
      var grown = malloc(123_460)!
      grown = realloc(grown, 223_460)!
      blocks["reallocGrow"] = grown
      var shrunk = malloc(123_461)!
      shrunk = realloc(shrunk, 23_461)!
      blocks["reallocShrink"] = shrunk
      var aligned: UnsafeMutableRawPointer?
      #expect(posix_memalign(&aligned, 64, 123_462) == 0)
      #expect(Int(bitPattern: aligned) % 64 == 0)
      blocks["posix_memalign"] = aligned!
      var rejected: UnsafeMutableRawPointer?
      #expect(posix_memalign(&rejected, 3, 100) == EINVAL)
      #expect(posix_memalign(&rejected, 4, 100) == EINVAL)  // not a multiple of sizeof(void *)
      #expect(rejected == nil)
      blocks["aligned_alloc"] = aligned_alloc(4096, 123_463)!
      #expect(Int(bitPattern: blocks["aligned_alloc"]) % 4096 == 0)
      blocks["memalign"] = memalign(256, 123_464)!
      #expect(Int(bitPattern: blocks["memalign"]) % 256 == 0)
      blocks["valloc"] = valloc(123_465)!
      #expect(Int(bitPattern: blocks["valloc"]) % 4096 == 0)
      blocks["pvalloc"] = pvalloc(123_466)!
      #expect(Int(bitPattern: blocks["pvalloc"]) % 4096 == 0)
      return blocks
    }

    @Test func everyMallocFamilyFunctionIsSeenAndItsFreesMatched() throws {
      let symbolizer = try Symbolizer()
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      let blocks = Self.allocateThroughEveryFunction()
      // realloc to size 0 frees; free of NULL is a no-op.
      let doomed = malloc(123_470)!
      #expect(realloc(doomed, 0) == nil)
      free(nil)
      let freedEarly = ["malloc", "calloc", "memalign", "pvalloc"]
      for name in freedEarly { free(blocks[name]) }
      let recording = recorder.stop()
      for (name, block) in blocks where !freedEarly.contains(name) { free(block) }

      let expectedSizes: [String: Int] = [
        "reallocNull": 123_459, "reallocGrow": 223_460, "reallocShrink": 23_461,
        "posix_memalign": 123_462, "aligned_alloc": 123_463, "valloc": 123_465,
      ]
      let live = Dictionary(recording.liveBlocks.map { ($0.address, $0) }, uniquingKeysWith: { a, _ in a })
      for (name, size) in expectedSizes {
        let block = try #require(live[UInt(bitPattern: blocks[name])], "\(name) not recorded")
        #expect(block.size == size, "\(name)")
        #expect(!block.isSwiftObject)
        // Its stack runs through the function that allocated it.
        let frames = AllocationsAnalysis().symbolize(recording.stacks[block.stackID] ?? [], symbolizer: symbolizer)
        #expect(frames.contains { $0.symbol.contains("allocateThroughEveryFunction") }, "\(name): \(frames.prefix(4))")
      }
      for name in freedEarly {
        #expect(live[UInt(bitPattern: blocks[name])] == nil, "\(name) was freed")
      }
      let sizes = Set(recording.liveBlocks.map(\.size))
      // The realloc'd-away sizes and the block freed by realloc(p, 0) are not live.
      #expect(!sizes.contains(123_460) && !sizes.contains(123_461) && !sizes.contains(123_470))
      #expect(!sizes.contains(123_457) && !sizes.contains(123_458) && !sizes.contains(123_464))
      // Transient: 4 early frees + 2 realloc moves/shrinks (maybe in place) + realloc(p, 0).
      let class128K = AllocationCategoryKey.malloc(sizeClass: Int(CPerfAlloc_sizeClass(123_457)))
      #expect((recording.freed[class128K]?.count ?? 0) >= 5)
    }

    /// A slot keeps sizes under 4 MiB; bigger blocks keep theirs in a table by address, through
    /// realloc and free, in both modes (types and counts takes them off its frameless path).
    @Test(arguments: AllocationRecordingMode.allCases)
    func bigBlocksKeepTheirExactSizes(mode: AllocationRecordingMode) throws {
      let recorder = try AllocationRecorder.start(mode: mode)
      let sizes = [4_194_303, 5_000_001, 9_000_003]
      let kept = sizes.map { malloc($0)! }
      let grown = realloc(malloc(4_194_310)!, 12_000_005)!
      let doomed = malloc(6_000_007)!
      free(doomed)
      let recording = recorder.stop()
      for block in kept { free(block) }
      free(grown)

      let live = Dictionary(recording.liveBlocks.map { ($0.address, $0.size) }, uniquingKeysWith: { a, _ in a })
      for (block, size) in zip(kept, sizes) {
        #expect(live[UInt(bitPattern: block)] == size)
      }
      #expect(live[UInt(bitPattern: grown)] == 12_000_005)
      let liveSizes = Set(live.values)
      #expect(!liveSizes.contains(6_000_007) && !liveSizes.contains(4_194_310))
      let freedClass = AllocationCategoryKey.malloc(sizeClass: Int(CPerfAlloc_sizeClass(6_000_007)))
      #expect((recording.freed[freedClass]?.bytes ?? 0) >= 6_000_007)
      let movedClass = AllocationCategoryKey.malloc(sizeClass: Int(CPerfAlloc_sizeClass(4_194_310)))
      #expect((recording.freed[movedClass]?.bytes ?? 0) >= 4_194_310)
      #expect(recording.liveBytesAtEnd >= sizes.reduce(12_000_005, +))
      #expect(recording.lostBlocks == 0)
    }

    /// Generation indices take 16 bits per block: marks past the limit open no generation,
    /// and were dropped without a trace while the report said nothing was lost.
    @Test("marks past the 65,535-generation limit are counted as lost")
    func marksPastTheLimit() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      for index in 0..<(CPerfAlloc_MaxMarks + 5) { recorder.markGeneration(label: "m\(index)") }
      let recording = recorder.stop()
      #expect(recording.lostMarks == 5)
      let report = Self.report(recording)
      #expect(report.lost.marks == 5)
      #expect(report.generations.count <= CPerfAlloc_MaxMarks + 1)
      let json = String(decoding: try JSONEncoder().encode(report), as: UTF8.self)
      #expect(json.contains(#""marks":5"#), "\(json.prefix(300))")
    }

    @Test func generationGrowthIsExact() throws {
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      var first: [AllocProbeGeneration] = (0..<100).map { _ in AllocProbeGeneration() }
      recorder.markGeneration(label: "first")
      let second: [AllocProbeGeneration] = (0..<50).map { _ in AllocProbeGeneration() }
      recorder.markGeneration(label: "second")
      first.removeLast(50)
      let recording = recorder.stop()
      withExtendedLifetime((first, second)) {}
      let report = Self.report(recording, symbolizer: try Symbolizer())

      let name = _typeName(AllocProbeGeneration.self, qualified: true)
      let instanceSize = try #require(
        recording.liveBlocks.first { recording.category(for: $0.categoryKey).name == name }?.size)
      // A mark closes its generation, as in Instruments.
      #expect(report.generations.map(\.label) == ["first", "second", AllocationsAnalysis.afterLastMarkLabel])
      #expect(report.generations.map(\.index) == [0, 1, 2])
      func growth(_ generation: Int) -> AllocationsReport.GrowthCategory? {
        report.generations[generation].categories.first { $0.name == name }
      }
      let g0 = try #require(growth(0))
      #expect(g0.growthCount == 50 && g0.growthBytes == 50 * instanceSize)
      let g1 = try #require(growth(1))
      #expect(g1.growthCount == 50 && g1.growthBytes == 50 * instanceSize)
      #expect(growth(2) == nil)
      #expect(g0.allocationStack.contains { $0.symbol.contains("generationGrowthIsExact") })
      // The second mark saw at least the 50 probes allocated after the first.
      #expect(report.generations[1].liveBytes >= report.generations[0].liveBytes + 50 * instanceSize)
      #expect(report.generations[0].endMilliseconds <= report.generations[1].endMilliseconds)
      #expect(report.timeline.count >= 2)
      // The peak is sampled (timeline points, marks, stop), so it is at least the heap at
      // the second mark.
      #expect(report.totals.peakLiveBytes >= report.generations[1].liveBytes)
      #expect(report.totals.peakLiveBytes >= report.totals.liveBytesAtEnd)
    }

    @Test func blocksFromBeforeStartAreIgnored() throws {
      var early: [AllocProbeBeforeStart] = (0..<200).map { _ in AllocProbeBeforeStart() }
      let earlyBytes = malloc(123_480)
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      early.removeAll()
      free(earlyBytes)
      let recording = recorder.stop()
      let report = Self.report(recording)
      #expect(Self.category(report, AllocProbeBeforeStart.self) == nil)
      #expect(!recording.liveBlocks.contains { $0.size == 123_480 })
    }

    @Test func notRecordingRecordsNothingAndUsableSizeIsReal() throws {
      #expect(CPerfAlloc_isRecording() == 0)
      for size in [0, 1, 15, 16, 17, 100, 1000, 4096, 100_000, 1 << 20] {
        let block = malloc(size)!
        #expect(malloc_usable_size(block) >= size)
        free(block)
      }
      // Swift's Array grows its capacity into malloc_usable_size.
      var array: [UInt8] = []
      array.reserveCapacity(100)
      #expect(array.capacity >= 100)
      // A session started and stopped afterwards saw none of the above.
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      let recording = recorder.stop()
      #expect(!recording.liveBlocks.contains { $0.size == 1 << 20 })
      #expect(throws: Never.self) { try AllocationRecorder.start(mode: .countsOnly).stop() }
    }

    @Test func onlyOneRecorderAtATime() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      #expect(throws: AllocationRecorderError.self) { try AllocationRecorder.start(mode: .countsOnly) }
      #expect(throws: AllocationRecorderError.self) { try AllocationRecorder.start(mode: .fullStacks, maxDepth: 0) }
      _ = recorder.stop()
      _ = recorder.stop()  // idempotent
    }

    @Test func forkWhileRecording() throws {
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      let kept = (0..<10).map { _ in AllocProbeFork() }
      for round in 0..<5 {
        let pid = fork()
        #expect(pid >= 0)
        if pid == 0 {
          // Child: the tables must be usable (locks released) and nothing is recorded.
          var objects: [AllocProbeFork] = []
          for _ in 0..<1000 { objects.append(AllocProbeFork()) }
          let bytes = malloc(1000)
          free(bytes)
          _exit(objects.count == 1000 && CPerfAlloc_isRecording() == 0 ? 0 : 1)
        }
        // Parent keeps allocating while the child runs.
        let more = (0..<100).map { _ in AllocProbeFork() }
        _ = more.count
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid)
        #expect(status == 0, "round \(round): child exit status \(status)")
      }
      let recording = recorder.stop()
      withExtendedLifetime(kept) {}
      let probe = try #require(Self.category(Self.report(recording), AllocProbeFork.self))
      #expect(probe.persistentCount == 10)
      #expect(probe.transientCount == 500)
    }

    @inline(never)
    static func makeStackProbes() -> [AllocProbeStack] {
      (0..<20).map { _ in AllocProbeStack() }
    }

    @inline(never) static func allocateLeft() -> AnyObject { AllocProbeLeft() }
    @inline(never) static func allocateRight() -> AnyObject { AllocProbeRight() }

    /// Two callers of the same shape, called in turn from one loop, reach malloc with the
    /// same frames at the same addresses and differ only in one return address: the
    /// per-thread stack cache must tell them apart.
    @Test func stacksThatDifferInOneReturnAddressAreTwoStacks() throws {
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      var kept: [AnyObject] = []
      for _ in 0..<50 {
        kept.append(Self.allocateLeft())
        kept.append(Self.allocateRight())
      }
      let recording = recorder.stop()
      withExtendedLifetime(kept) {}
      let report = AllocationsAnalysis().report(from: recording, symbolizer: try Symbolizer())
      func stack(_ type: String) throws -> [String] {
        try #require(report.generations[0].categories.first { $0.name.hasSuffix(type) }).allocationStack.map(\.symbol)
      }
      let left = try stack("AllocProbeLeft")
      let right = try stack("AllocProbeRight")
      #expect(
        left.contains { $0.contains("allocateLeft") } && !left.contains { $0.contains("allocateRight") }, "\(left)")
      #expect(
        right.contains { $0.contains("allocateRight") } && !right.contains { $0.contains("allocateLeft") }, "\(right)")
    }

    @inline(never) static func descend(_ depth: Int, _ kept: inout [AnyObject]) {
      if depth == 0 {
        kept.append(AllocProbeDeep())
        return
      }
      descend(depth - 1, &kept)
      // Work after the call, so the recursion stays `depth` frames deep in any build.
      kept.reserveCapacity(0)
    }

    /// Two calls of the same recursion from one function, one from each branch: the frames
    /// differ only in the return address into this function.
    @inline(never) static func deepFrom(second: Bool, _ depth: Int, _ kept: inout [AnyObject]) {
      if second {
        descend(depth, &kept)
        kept.reserveCapacity(1)
      } else {
        descend(depth, &kept)
        kept.reserveCapacity(0)
      }
    }

    /// The same, with the one different return address `depth` frames below the allocation:
    /// the cache's check compares frames two at a time where the CPU allows, so depths of
    /// both parities put the difference in either half of a pair, or in the odd last frame.
    @Test(arguments: [9, 10, 11, 12])
    func stacksThatDifferOnlyFarBelowTheAllocationAreTwoStacks(depth: Int) throws {
      var kept: [AnyObject] = []
      kept.reserveCapacity(100)
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      for index in 0..<100 { Self.deepFrom(second: index % 2 == 1, depth, &kept) }
      let recording = recorder.stop()
      func stackIDs(parity: Int) -> Set<UInt32> {
        let addresses = Set(
          kept.enumerated().filter { $0.offset % 2 == parity }.map {
            UInt(bitPattern: Unmanaged.passUnretained($0.element).toOpaque())
          })
        return Set(recording.liveBlocks.filter { addresses.contains($0.address) }.map(\.stackID))
      }
      let first = stackIDs(parity: 0)
      let second = stackIDs(parity: 1)
      withExtendedLifetime(kept) {}
      #expect(first.count == 1 && second.count == 1 && first.isDisjoint(with: second), "\(first), \(second)")
      let stackA = recording.stacks[first.first ?? 0] ?? []
      let stackB = recording.stacks[second.first ?? 0] ?? []
      let differing = zip(stackA, stackB).enumerated().filter { $0.element.0 != $0.element.1 }.map(\.offset)
      #expect(stackA.count == stackB.count && differing.count == 1, "\(stackA) \(stackB)")
      // The one difference is the return address into deepFrom, under depth + 1 descends.
      let symbolizer = try Symbolizer()
      let names = stackA.map { symbolizer.frames(at: $0, isReturnAddress: true).last?.symbol ?? "" }
      if let index = differing.first {
        #expect(names[index].contains("deepFrom"), "\(names)")
        #expect(names[..<index].filter { $0.contains("descend") }.count == depth + 1, "\(names)")
      }
    }

    @Test func fullStacksSymbolizeToTheAllocatingFunction() throws {
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      let probes = Self.makeStackProbes()
      let recording = recorder.stop()
      withExtendedLifetime(probes) {}
      var analysis = AllocationsAnalysis()
      let report = analysis.report(from: recording, symbolizer: try Symbolizer())
      let growth = try #require(report.generations[0].categories.first { $0.name.hasSuffix("AllocProbeStack") })
      #expect(growth.growthCount == 20)
      #expect(growth.allocationStack.contains { $0.symbol.contains("makeStackProbes") })
      #expect(growth.allocationStack.count >= 4)
      analysis.hideSystemLibraries = true
      analysis.isAppFrame = { $0.symbol.contains("AllocationRecorderTests") }
      let hidden = analysis.report(from: recording, symbolizer: try Symbolizer())
      let hiddenStack = try #require(
        hidden.generations[0].categories.first { $0.name.hasSuffix("AllocProbeStack") }?.allocationStack)
      #expect(!hiddenStack.isEmpty && hiddenStack.allSatisfy(\.isApp))
      // Counts-only records no stacks.
      let countsOnly = try AllocationRecorder.start(mode: .countsOnly)
      let more = Self.makeStackProbes()
      let plain = countsOnly.stop()
      withExtendedLifetime(more) {}
      #expect(plain.liveBlocks.allSatisfy { $0.stackID == 0 })
      #expect(plain.stacks.isEmpty)
    }

    @Test func reportEncodesToJSON() throws {
      let recorder = try AllocationRecorder.start(mode: .countsOnly)
      recorder.markGeneration(label: "only")
      let probes = (0..<3).map { _ in AllocProbeA() }
      let report = Self.report(recorder.stop())
      withExtendedLifetime(probes) {}
      #expect(report.generations.count == 2)
      #expect(report.totals.persistentCount >= 3)
      #expect(AllocationCategory.malloc(sizeClass: 0).name == "Malloc 16 Bytes")
      #expect(AllocationCategory.malloc(sizeClass: 6).name == "Malloc 1.00 KiB")
      #expect(AllocationCategory.malloc(sizeClass: 12).name == "Malloc 64.00 KiB")
      #expect(AllocationCategory.malloc(sizeClass: 16).name == "Malloc 1.00 MiB")
      #expect(CPerfAlloc_sizeClass(16) == 0 && CPerfAlloc_sizeClass(17) == 1 && CPerfAlloc_sizeClass(1024) == 6)
    }

    @Test func foundationDispatchAndSwiftCoreCallsAreInterposed() throws {
      let recorder = try AllocationRecorder.start(mode: .fullStacks)
      let data = try JSONEncoder().encode(["key": [1, 2, 3], "other": [4, 5, 6]])
      let queue = DispatchQueue(label: "alloc-probe-queue")
      let group = DispatchGroup()
      queue.async(group: group) { _ = data.count }
      group.wait()
      let recording = recorder.stop()
      withExtendedLifetime((data, queue)) {}
      let symbolizer = try Symbolizer()
      // The image of each live block's direct malloc caller.
      var images = Set<String>()
      for block in recording.liveBlocks {
        guard let leaf = recording.stacks[block.stackID]?.first else { continue }
        if let image = symbolizer.frames(at: leaf, isReturnAddress: true).last?.image { images.insert(image) }
      }
      #expect(images.contains { $0.hasPrefix("libswiftCore") }, "\(images)")
      #expect(images.contains { $0.hasPrefix("libFoundation") }, "\(images)")
      #expect(images.contains { $0.hasPrefix("libdispatch") }, "\(images)")
    }
  }
}

@Suite("A listed block's size in memory")
struct RecordedBlockLayoutTests {
  /// A big heap's listing holds one per live block, beside the scan's arrays: its size is a
  /// share of the leaks instrument's peak memory.
  @Test func aListedBlockTakes24BytesAndKeepsItsFields() {
    #expect(MemoryLayout<RecordedBlock>.stride == 24)
    var block = RecordedBlock(
      address: 0x7fff_ffff_fff0, size: 1 << 40, metadata: 0x7fff_5555_0008, isSwiftObject: true, stackID: 0xFEDC_BA98,
      generation: 0xFFFF)
    #expect(block.address == 0x7fff_ffff_fff0 && block.metadata == 0x7fff_5555_0008)
    #expect(block.stackID == 0xFEDC_BA98 && block.generation == 0xFFFF)
    #expect(block.size == 1 << 40 && block.isSwiftObject)
    // Each field set alone leaves the others, packed beside it, as they were.
    block.generation = 7
    block.size = 48
    block.isSwiftObject = false
    block.stackID = 3
    #expect(block.generation == 7 && block.size == 48 && !block.isSwiftObject && block.stackID == 3)
    #expect(block.address == 0x7fff_ffff_fff0 && block.metadata == 0x7fff_5555_0008)
    block.address = 0x1000
    block.metadata = 0x2000
    #expect(block.stackID == 3 && block.address == 0x1000 && block.metadata == 0x2000)
    // Beyond 47 bits a size is clamped, never spilled into the flag or the generation.
    block.size = Int.max
    #expect(block.size == (1 << 47) - 1 && !block.isSwiftObject && block.generation == 7)
    // A word that cannot be a user-space pointer is no metadata.
    block.metadata = UInt.max
    #expect(block.metadata == 0 && block.stackID == 3)
  }

  /// The leak analysis compares categories in their raw form, block after block: each must
  /// read back as the block's own key.
  @Test(arguments: [
    (size: 48, metadata: UInt(0x7fff_5555_0008), isSwiftObject: true),
    (size: 48, metadata: UInt(0x7fff_5555_0008), isSwiftObject: false),
    (size: 48, metadata: UInt(0), isSwiftObject: true),
    (size: 48, metadata: UInt(0x7fff_5555_0004), isSwiftObject: true),
    (size: 0, metadata: UInt(0), isSwiftObject: false),
    (size: 1 << 40, metadata: UInt(0), isSwiftObject: false),
  ])
  func aBlocksRawCategoryKeyReadsBackAsItsKey(size: Int, metadata: UInt, isSwiftObject: Bool) {
    let block = RecordedBlock(
      address: 0x1000, size: size, metadata: metadata, isSwiftObject: isSwiftObject, stackID: 9, generation: 2)
    #expect(AllocationCategoryKey(rawKey: block.rawCategoryKey) == block.categoryKey)
  }
}
