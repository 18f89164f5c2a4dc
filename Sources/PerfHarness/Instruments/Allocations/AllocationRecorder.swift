import CPerfAlloc
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What the Allocations recorder captures per block.
enum AllocationRecordingMode: String, Sendable, CaseIterable, Codable {
  /// Sizes, Swift types, generations, counts. About as cheap as counting.
  case countsOnly
  /// Also the allocation stack of every block (frame-pointer walk, deduplicated).
  case fullStacks
}

/// A block allocated while recording and still live when recording stopped.
struct RecordedBlock: Sendable, Hashable {
  // Laid out in 24 bytes, the words of the recorder's listing (CPerfAlloc_Block): a big
  // heap's listing holds millions of these beside the leak scan's arrays (at 48 bytes, the
  // program and its listing alone were 1.8x its untracked memory). Addresses and metadata
  // pointers are user-space addresses, under 2^48 (the recorder tracks blocks under 2^47),
  // which leaves their top 16 bits for the stack id. What no report reads (a block's
  // thread and time) is not kept.
  /// The address (low 48 bits) and the stack id's low 16 bits.
  private var addressWord: UInt64
  /// The metadata pointer (low 48 bits) and the stack id's high 16 bits.
  private var metadataWord: UInt64
  /// The size (low 47 bits), the Swift-object flag (bit 47) and the generation (high 16).
  private var sizeWord: UInt64

  private static let low48: UInt64 = (1 << 48) - 1
  private static let sizeMask: UInt64 = (1 << 47) - 1
  private static let objectBit = CPerfAlloc_BlockObjectBit

  var address: UInt {
    get { UInt(addressWord & Self.low48) }
    set { addressWord = (addressWord & ~Self.low48) | (UInt64(newValue) & Self.low48) }
  }

  /// Swift metadata pointer when `isSwiftObject`, else 0 (0 too for a word that cannot be
  /// a user-space pointer).
  var metadata: UInt {
    get { UInt(metadataWord & Self.low48) }
    set { metadataWord = (metadataWord & ~Self.low48) | (UInt64(newValue) <= Self.low48 ? UInt64(newValue) : 0) }
  }

  /// Key into `AllocationRecording.stacks`; 0 when no stack was captured.
  var stackID: UInt32 {
    get { UInt32(addressWord >> 48) | UInt32(metadataWord >> 48) << 16 }
    set {
      addressWord = (addressWord & Self.low48) | UInt64(newValue & 0xFFFF) << 48
      metadataWord = (metadataWord & Self.low48) | UInt64(newValue >> 16) << 48
    }
  }

  /// Bytes (up to 2^47 - 1, clamped: more than a user address space holds).
  var size: Int {
    get { Int(sizeWord & Self.sizeMask) }
    set { sizeWord = (sizeWord & ~Self.sizeMask) | min(UInt64(max(newValue, 0)), Self.sizeMask) }
  }

  var isSwiftObject: Bool {
    get { sizeWord & Self.objectBit != 0 }
    set { sizeWord = newValue ? sizeWord | Self.objectBit : sizeWord & ~Self.objectBit }
  }

  /// 0 before the first mark; n after the n-th mark (at most 0xFFFF: the recorder's slots
  /// keep 16 bits).
  var generation: Int {
    get { Int(sizeWord >> 48) }
    set { sizeWord = (sizeWord & ((1 << 48) - 1)) | UInt64(min(max(newValue, 0), 0xFFFF)) << 48 }
  }

  init(address: UInt, size: Int, metadata: UInt, isSwiftObject: Bool, stackID: UInt32, generation: Int) {
    (addressWord, metadataWord, sizeWord) = (0, 0, 0)
    self.address = address
    self.metadata = metadata
    self.stackID = stackID
    self.size = size
    self.isSwiftObject = isSwiftObject
    self.generation = generation
  }

  var categoryKey: AllocationCategoryKey {
    AllocationCategoryKey(block: size, metadata: metadata, isSwiftObject: isSwiftObject)
  }

  /// `categoryKey` in the C side's raw form (`AllocationCategoryKey(rawKey:)` reads it back).
  var rawCategoryKey: UInt64 {
    AllocationCategoryKey.rawKey(block: size, metadata: metadata, isSwiftObject: isSwiftObject)
  }
}

extension RecordedBlock {
  /// The recorder's listing packs a block as this type does: its words are taken as they
  /// are (a field at a time, a big heap's listing cost 14 ns a block), less the flag that
  /// says where the block was listed.
  init(_ block: CPerfAlloc_Block) {
    addressWord = block.addressWord
    metadataWord = block.metadataWord
    sizeWord = block.sizeWord & ~CPerfAlloc_BlockPreexistingBit
  }

  /// The block as the recorder's listing writes it.
  var listingWords: CPerfAlloc_Block {
    CPerfAlloc_Block(addressWord: addressWord, metadataWord: metadataWord, sizeWord: sizeWord)
  }

  /// Whether an array of these can take the recorder's listing as it is
  /// (`CPerfAlloc_stopInto`): the same words in the same places.
  static let hasListingLayout =
    MemoryLayout<RecordedBlock>.stride == MemoryLayout<CPerfAlloc_Block>.stride
    && MemoryLayout<RecordedBlock>.offset(of: \.addressWord) == MemoryLayout<CPerfAlloc_Block>.offset(of: \.addressWord)
    && MemoryLayout<RecordedBlock>.offset(of: \.metadataWord)
      == MemoryLayout<CPerfAlloc_Block>.offset(of: \.metadataWord)
    && MemoryLayout<RecordedBlock>.offset(of: \.sizeWord) == MemoryLayout<CPerfAlloc_Block>.offset(of: \.sizeWord)

  /// A block from before the session, in a listing of both (`CPerfAlloc_liveBlocksNow`).
  static func isPreexisting(_ block: CPerfAlloc_Block) -> Bool {
    block.sizeWord & CPerfAlloc_BlockPreexistingBit != 0
  }
}

struct FreedAggregate: Sendable, Hashable {
  var count: Int
  var bytes: Int
}

struct AllocationGenerationMark: Sendable, Hashable {
  /// The generation this mark opens (1 for the first mark).
  var index: Int
  var label: String
  var timestampNanoseconds: UInt64
  /// Tracked live heap when the mark was taken.
  var liveBytes: Int
  var liveBlocks: Int
}

struct LiveHeapSample: Sendable, Hashable {
  var timestampNanoseconds: UInt64
  var liveBytes: Int
}

/// Everything one recording produced, unsymbolized.
struct AllocationRecording: Sendable {
  var mode: AllocationRecordingMode
  var startNanoseconds: UInt64
  var stopNanoseconds: UInt64
  var liveBlocks: [RecordedBlock]
  /// Blocks allocated and freed while recording, merged by category.
  var freed: [AllocationCategoryKey: FreedAggregate]
  /// Names for every category key in `liveBlocks` and `freed`.
  var categories: [AllocationCategoryKey: AllocationCategory]
  /// Stacks of the live blocks, leaf first (frames[0] is the return address in the
  /// allocating function).
  var stacks: [UInt32: [UInt]]
  var marks: [AllocationGenerationMark]
  var timeline: [LiveHeapSample]
  var totalAllocations: Int
  var totalBytes: Int
  var trackedFrees: Int
  var peakLiveBytes: Int
  var liveBytesAtEnd: Int
  var lostBlocks: Int
  var lostStacks: Int
  var lostFreedKeys: Int
  var lostTimeline: Int
  /// Bytes of the live-block tables at stop (without the stack table).
  var blockTableBytes: Int
  var stackTableBytes: Int
  /// Runtime call sites recognized as Swift object allocations (0: no types).
  var swiftObjectSites: Int
  /// Blocks allocated before the recording and still live at its end, when the process
  /// tracked every block from its start (`CPerfAlloc_trackAllBlocks`); else empty. The
  /// leaks instrument scans them as holders; no statistic counts them.
  var preexistingBlocks: [RecordedBlock] = []
  /// Full stacks: every allocation while recording (freed or not) by stack id; their
  /// frames are in `stacks` too.
  var allocationsByStack: [UInt32: FreedAggregate] = [:]
  /// Allocations the totals by stack could not place (their table was full).
  var lostStackTotals = 0
  /// Marks past `CPerfAlloc_MaxMarks`, which open no generation: what was allocated after
  /// them counts in the last generation that was opened.
  var lostMarks = 0

  func category(for key: AllocationCategoryKey) -> AllocationCategory {
    if let known = categories[key] { return known }
    switch key {
    case .malloc(let sizeClass): return .malloc(sizeClass: sizeClass)
    case .overflow: return .overflow
    case .swiftObject: return AllocationCategory(name: "Swift object", kind: .unknownSwiftObject)
    }
  }
}

/// The Allocations instrument's recorder: interposed malloc family, generations, a
/// live-heap timeline. One recorder at a time per process; stop it (or drop it) before
/// starting the next.
final class AllocationRecorder: Sendable {
  let mode: AllocationRecordingMode
  let maxDepth: Int

  private struct State {
    var labels: [Int: String] = [:]
    var marksDropped = 0
    var result: AllocationRecording?
  }
  private let state = Mutex(State())

  private init(mode: AllocationRecordingMode, maxDepth: Int) {
    self.mode = mode
    self.maxDepth = maxDepth
  }

  static let depthRange = Int(CPerfAlloc_MinDepth)...Int(CPerfAlloc_MaxDepth)

  static func start(
    mode: AllocationRecordingMode, maxDepth: Int = Int(CPerfAlloc_DefaultDepth),
    timelineIntervalMicroseconds: Int = Int(CPerfAlloc_DefaultTimelineIntervalUs)
  ) throws -> AllocationRecorder {
    guard depthRange.contains(maxDepth) else {
      throw AllocationRecorderError(
        code: .invalidConfiguration,
        message:
          "maxDepth \(maxDepth) is out of range; accepted: \(depthRange.lowerBound)...\(depthRange.upperBound) frames",
        errnoValue: nil)
    }
    guard (1...1_000_000).contains(timelineIntervalMicroseconds) else {
      throw AllocationRecorderError(
        code: .invalidConfiguration,
        message: "timelineIntervalMicroseconds \(timelineIntervalMicroseconds) is out of range; accepted: 1...1000000",
        errnoValue: nil)
    }
    var config = CPerfAlloc_Config(
      mode: mode == .fullStacks ? Int32(CPerfAlloc_ModeFullStacks.rawValue) : Int32(CPerfAlloc_ModeCountsOnly.rawValue),
      maxDepth: Int32(maxDepth), timelineIntervalUs: UInt32(timelineIntervalMicroseconds), timelineCapacity: 0)
    var error = CPerfAlloc_Error()
    let status = CPerfAlloc_start(&config, &error)
    guard status == Int32(CPerfAlloc_OK.rawValue) else {
      throw AllocationRecorderError(
        status: status, error: error, busy: CPerfAlloc_ErrorBusy.rawValue, system: CPerfAlloc_ErrorSystem.rawValue,
        state: CPerfAlloc_ErrorState.rawValue, running: "allocation recording")
    }
    return ignoringAllocations { AllocationRecorder(mode: mode, maxDepth: maxDepth) }
  }

  /// Runs `body` with the calling thread's allocations unrecorded (its frees still count):
  /// for the harness's own objects made while a scenario records, which are not the
  /// scenario's.
  static func ignoringAllocations<Result>(_ body: () throws -> Result) rethrows -> Result {
    let previous = CPerfAlloc_setIgnoringAllocations(1)
    defer { _ = CPerfAlloc_setIgnoringAllocations(previous) }
    return try body()
  }

  /// A copy of `string` in memory the recorder ignores, for the harness to keep. The
  /// scenario's own string (a label it built) is then freed when the scenario drops it,
  /// as it would be without the harness; kept as it is, its storage would stay alive in the
  /// harness's tables, which the leak scan does not see, and read as a leak.
  static func harnessCopy(_ string: String) -> String {
    ignoringAllocations { String(decoding: Array(string.utf8), as: UTF8.self) }
  }

  /// Opens a new generation: blocks allocated from now on belong to it. `label` names
  /// what happens after the mark. Ignored after stop; beyond `CPerfAlloc_MaxMarks`
  /// counted in `lostMarks`.
  func markGeneration(label: String) {
    state.withLock { state in
      guard state.result == nil else { return }
      var mark = CPerfAlloc_Mark()
      guard CPerfAlloc_markGeneration(&mark) == Int32(CPerfAlloc_OK.rawValue) else {
        state.marksDropped += 1
        return
      }
      Self.ignoringAllocations { state.labels[Int(mark.generation)] = label }
    }
  }

  /// Stops recording and returns everything recorded. Calling it again returns the same
  /// recording.
  /// - Parameter keepingFreedWords: for a leak scan under `watchFrees`: from the listing
  ///   on, before the stop names the categories, this thread keeps a copy of each listed
  ///   block it frees (`LeakAnalysis.keepFreedWords`).
  func stop(keepingFreedWords: Bool = false) -> AllocationRecording {
    state.withLock { state in
      if let result = state.result { return result }
      var result = Self.collect(mode: mode, labels: state.labels, keepingFreedWords: keepingFreedWords)
      result.lostMarks = state.marksDropped
      state.result = result
      return result
    }
  }

  deinit {
    // A recorder dropped without stop() must not keep the process's only slot.
    state.withLock { state in
      if state.result == nil { _ = Self.collect(mode: mode, labels: state.labels) }
    }
  }

  /// For a leak scan of the next listing (`stop()` or `checkpoint()`): from that listing on,
  /// the blocks freed are logged, and the scan leaves them out
  /// (`HeapGraph.Options.leavesOutFreedBlocks`), since the harness's own work in between
  /// frees blocks and gets their addresses back. End it after the scan.
  static func watchFrees() { CPerfAlloc_watchFrees() }
  static func endWatchingFrees() { CPerfAlloc_endWatchingFrees() }

  /// The blocks live now, while recording goes on: live blocks, holders, their names and
  /// stacks (the rest of the recording is empty). For a leak check in the middle of a
  /// run; call it with the calling thread ignored (`CPerfAlloc_setIgnoringAllocations`).
  /// Nil when nothing records.
  func checkpoint() -> AllocationRecording? {
    let stride = MemoryLayout<CPerfAlloc_Block>.stride
    var listed: [CPerfAlloc_Block] = []
    // The list is copied into memory that is no block: malloc'd memory allocated by the
    // listing would itself be listed.
    for _ in 0..<4 {
      let wanted = CPerfAlloc_liveBlocksNow(nil, 0)
      guard wanted > 0 else { return nil }
      let capacity = Int(wanted) + Int(wanted) / 4 + 1024
      let bytes = capacity * stride
      guard let mapped = mmap(nil, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
        mapped != MAP_FAILED
      else { return nil }
      defer { munmap(mapped, bytes) }
      let buffer = mapped.bindMemory(to: CPerfAlloc_Block.self, capacity: capacity)
      let count = Int(CPerfAlloc_liveBlocksNow(buffer, UInt64(capacity)))
      if count <= capacity {
        listed = Array(UnsafeBufferPointer(start: buffer, count: count))
        break
      }
    }
    var liveBlocks: [RecordedBlock] = []
    var preexistingBlocks: [RecordedBlock] = []
    for block in listed {
      if RecordedBlock.isPreexisting(block) {
        preexistingBlocks.append(RecordedBlock(block))
      } else {
        liveBlocks.append(RecordedBlock(block))
      }
    }
    var stacks: [UInt32: [UInt]] = [:]
    Self.readStacks(of: liveBlocks, into: &stacks)
    var names = CategoryNamer()
    names.name(liveBlocks)
    for block in preexistingBlocks where block.isSwiftObject { names.name(block.categoryKey) }
    return AllocationRecording(
      mode: mode, startNanoseconds: 0, stopNanoseconds: 0, liveBlocks: liveBlocks, freed: [:],
      categories: names.categories, stacks: stacks, marks: [], timeline: [], totalAllocations: 0, totalBytes: 0,
      trackedFrees: 0, peakLiveBytes: 0, liveBytesAtEnd: 0, lostBlocks: 0, lostStacks: 0, lostFreedKeys: 0,
      lostTimeline: 0, blockTableBytes: 0, stackTableBytes: 0, swiftObjectSites: 0,
      preexistingBlocks: preexistingBlocks)
  }

  private static func readStacks(of blocks: [RecordedBlock], into stacks: inout [UInt32: [UInt]]) {
    // Blocks in address order mostly come in runs from one stack: a run costs one lookup,
    // not one per block (hashing each of a 16 M-block heap's ids took 125 ms).
    var previous: UInt32 = 0
    var ids: [UInt32] = []
    for block in blocks where block.stackID != previous {
      previous = block.stackID
      ids.append(previous)
    }
    readStacks(ids: ids, into: &stacks)
  }

  private static func readStacks(ids: some Sequence<UInt32>, into stacks: inout [UInt32: [UInt]]) {
    for id in ids where id != 0 && stacks[id] == nil {
      var depth: UInt32 = 0
      if let frames = CPerfAlloc_stackFrames(id, &depth) {
        stacks[id] = UnsafeBufferPointer(start: frames, count: Int(depth)).map { UInt($0) }
      }
    }
  }

  /// Names categories while every type is still loaded.
  private struct CategoryNamer {
    var namer = SwiftMetadataNamer()
    var categories: [AllocationCategoryKey: AllocationCategory] = [:]

    mutating func name(_ key: AllocationCategoryKey) {
      guard categories[key] == nil else { return }
      switch key {
      case .swiftObject(let metadata): categories[key] = namer.category(forMetadata: metadata)
      case .malloc(let sizeClass): categories[key] = .malloc(sizeClass: sizeClass)
      case .overflow: categories[key] = .overflow
      }
    }

    /// Every block's category; neighbours mostly share a type, so the previous key is
    /// skipped without a lookup.
    mutating func name(_ blocks: [RecordedBlock]) {
      var previous: AllocationCategoryKey?
      for block in blocks where block.categoryKey != previous {
        name(block.categoryKey)
        previous = block.categoryKey
      }
    }
  }

  /// Room for the stop's listing in the array that keeps it, for the blocks live just
  /// before the stop. A test sets 0 to have the recorder's own listing copied instead.
  nonisolated(unsafe) static var listingRoom: (Int) -> Int = { $0 + $0 / 8 + 4096 }

  private static func collect(
    mode: AllocationRecordingMode, labels: [Int: String], keepingFreedWords: Bool = false
  ) -> AllocationRecording {
    var error = CPerfAlloc_Error()
    // The live blocks are listed straight into the array that keeps them when they fit:
    // copied from a listing of the recorder's own, a big heap's blocks took their pages
    // twice (16 M blocks: 170 ms). There is room for the blocks allocated between the count
    // and the stop; the array's pages past the listing are never touched.
    var listedInPlace = false
    let capacity = RecordedBlock.hasListingLayout ? listingRoom(Int(CPerfAlloc_liveBlocksNow(nil, 0))) : 0
    let inPlace = ignoringAllocations {
      [RecordedBlock](unsafeUninitializedCapacity: capacity) { buffer, initialized in
        initialized = 0
        buffer.withMemoryRebound(to: CPerfAlloc_Block.self) { listing in
          _ = CPerfAlloc_stopInto(listing.baseAddress, UInt64(listing.count), &error)
          var listed: UInt64 = 0
          if let blocks = CPerfAlloc_blocks(&listed), blocks == UnsafePointer(listing.baseAddress) {
            listedInPlace = true
            initialized = Int(listed)
          }
        }
      }
    }
    defer { CPerfAlloc_release() }
    var stats = CPerfAlloc_Stats()
    CPerfAlloc_stats(&stats)

    var count: UInt64 = 0
    func recordedBlocks(
      _ blocks: UnsafePointer<CPerfAlloc_Block>?, count: UInt64, release: ((UInt64) -> Void)? = nil
    ) -> [RecordedBlock] {
      guard let blocks else { return [] }
      let total = Int(count)
      // A chunk at a time, each chunk's C listing given back once copied: the two listings
      // of a big heap are never held whole together (its peak memory).
      return [RecordedBlock](unsafeUninitializedCapacity: total) { buffer, initialized in
        var next = 0
        while next < total {
          let end = min(next + 65_536, total)
          for index in next..<end { (buffer.baseAddress! + index).initialize(to: RecordedBlock(blocks[index])) }
          next = end
          release?(UInt64(end))
        }
        initialized = total
      }
    }
    let liveBlocks =
      listedInPlace
      ? inPlace : recordedBlocks(CPerfAlloc_blocks(&count), count: count, release: CPerfAlloc_releaseBlocksBefore)
    // Naming the categories below names types, which grows the runtime's cache of type
    // names: its table moves to a block no listing holds, and the listed one is freed. Kept
    // from here, the names the program had cached stay reachable (two of a Hummingbird
    // server's read as root leaks in every run while the copies began after the stop).
    if keepingFreedWords { LeakAnalysis.keepFreedWords(of: liveBlocks) }
    let preexistingBlocks = recordedBlocks(CPerfAlloc_preexistingBlocks(&count), count: count)

    var freed: [AllocationCategoryKey: FreedAggregate] = [:]
    if let entries = CPerfAlloc_freed(&count) {
      for entry in UnsafeBufferPointer(start: entries, count: Int(count)) {
        freed[AllocationCategoryKey(rawKey: entry.key), default: FreedAggregate(count: 0, bytes: 0)].count += Int(
          entry.count)
        freed[AllocationCategoryKey(rawKey: entry.key)]!.bytes += Int(entry.bytes)
      }
    }

    var stacks: [UInt32: [UInt]] = [:]
    readStacks(of: liveBlocks, into: &stacks)
    var allocationsByStack: [UInt32: FreedAggregate] = [:]
    if let entries = CPerfAlloc_allocationsByStack(&count) {
      for entry in UnsafeBufferPointer(start: entries, count: Int(count)) where entry.key != UInt64.max {
        let id = UInt32(truncatingIfNeeded: entry.key)
        allocationsByStack[id, default: FreedAggregate(count: 0, bytes: 0)].count += Int(entry.count)
        allocationsByStack[id]!.bytes += Int(entry.bytes)
      }
    }
    readStacks(ids: allocationsByStack.keys, into: &stacks)

    var marks: [AllocationGenerationMark] = []
    if let raw = CPerfAlloc_marks(&count) {
      for mark in UnsafeBufferPointer(start: raw, count: Int(count)) {
        marks.append(
          AllocationGenerationMark(
            index: Int(mark.generation), label: labels[Int(mark.generation)] ?? "Generation \(mark.generation)",
            timestampNanoseconds: mark.timestampNs, liveBytes: Int(mark.liveBytes), liveBlocks: Int(mark.liveBlocks)))
      }
    }

    var timeline: [LiveHeapSample] = []
    if let points = CPerfAlloc_timeline(&count) {
      timeline = UnsafeBufferPointer(start: points, count: Int(count)).map {
        LiveHeapSample(timestampNanoseconds: $0.timestampNs, liveBytes: Int($0.liveBytes))
      }
      timeline.sort { $0.timestampNanoseconds < $1.timestampNanoseconds }
    }

    var names = CategoryNamer()
    names.name(liveBlocks)
    for key in freed.keys { names.name(key) }
    // The scan reads array storage headers of holders too.
    for block in preexistingBlocks where block.isSwiftObject { names.name(block.categoryKey) }
    let categories = names.categories

    return AllocationRecording(
      mode: mode, startNanoseconds: stats.startNs, stopNanoseconds: stats.stopNs, liveBlocks: liveBlocks,
      freed: freed, categories: categories, stacks: stacks, marks: marks, timeline: timeline,
      totalAllocations: Int(stats.totalAllocations), totalBytes: Int(stats.totalBytes),
      trackedFrees: Int(stats.trackedFrees), peakLiveBytes: Int(stats.peakLiveBytes),
      liveBytesAtEnd: Int(stats.liveBytes), lostBlocks: Int(stats.lostBlocks), lostStacks: Int(stats.lostStacks),
      lostFreedKeys: Int(stats.lostFreedKeys), lostTimeline: Int(stats.lostTimeline),
      blockTableBytes: Int(stats.blockTableBytes), stackTableBytes: Int(stats.stackTableBytes),
      swiftObjectSites: Int(stats.swiftObjectSites), preexistingBlocks: preexistingBlocks,
      allocationsByStack: allocationsByStack, lostStackTotals: Int(stats.lostStackTotals))
  }
}
