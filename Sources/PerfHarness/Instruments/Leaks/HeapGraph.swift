import CPerfAlloc
import CPerfHeapScan
import CPerfSampler

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

struct HeapScanError: Error, CustomStringConvertible {
  var call: String
  var errnoValue: Int32

  var description: String {
    "heap scan failed: \(call) (errno \(errnoValue): \(String(cString: strerror(errnoValue))))"
  }
}

/// One of the heap graph's columns of numbers: the array the C scan mapped, taken over as
/// it is (copied, a big heap's every edge was written twice: 140 ms for 16 M blocks), or a
/// copy of a Swift array. Read-only once made, its memory freed with its last copy: it
/// can be shared between threads.
struct GraphColumn<Element>: RandomAccessCollection, @unchecked Sendable {
  private final class Storage {
    let release: () -> Void
    init(release: @escaping () -> Void) { self.release = release }
    deinit { release() }
  }

  private let storage: Storage
  private let values: UnsafeBufferPointer<Element>

  private init(_ values: UnsafeBufferPointer<Element>, release: @escaping () -> Void) {
    storage = Storage(release: release)
    self.values = values
  }

  init(_ array: [Element]) {
    let buffer = UnsafeMutableBufferPointer<Element>.allocate(capacity: array.count)
    _ = buffer.initialize(from: array)
    self.init(UnsafeBufferPointer(buffer)) {
      buffer.deinitialize()
      buffer.deallocate()
    }
  }

  var startIndex: Int { 0 }
  var endIndex: Int { values.count }
  subscript(position: Int) -> Element { values[position] }

  func withUnsafeBufferPointer<R>(_ body: (UnsafeBufferPointer<Element>) throws -> R) rethrows -> R {
    try withExtendedLifetime(storage) { try body(values) }
  }
}

extension GraphColumn: ExpressibleByArrayLiteral {
  init(arrayLiteral elements: Element...) { self.init(elements) }
}

extension GraphColumn<UInt32> {
  /// Takes `column` over from a scan's result (which is left without it).
  init(taking column: inout CPerfHeapScan_Column) {
    var taken = column
    column = CPerfHeapScan_Column()
    self.init(UnsafeBufferPointer(start: taken.data, count: taken.data == nil ? 0 : Int(taken.count))) {
      CPerfHeapScan_freeColumn(&taken)
    }
  }
}

extension GraphColumn<UInt8> {
  /// Takes the marks over from a scan's result (which is left without them): copied, they
  /// were a byte a block of fresh pages more (16 MB at 16 M blocks).
  init(takingMarksOf result: inout CPerfHeapScan_Result, count: Int) {
    guard let marks = result.marks else {
      self.init([UInt8](repeating: 0, count: count))
      return
    }
    let blockCount = result.blockCount
    result.marks = nil
    self.init(UnsafeBufferPointer(start: marks, count: count)) { CPerfHeapScan_freeMarks(marks, blockCount) }
  }
}

/// The memory graph of the live blocks of a recording: nodes are blocks (sorted by
/// address), edges are the words of one block that point into another, roots mark the
/// blocks that a stack, a register or a writable image segment points to.
///
/// Edges are stored compressed (CSR): the edges of node `n` are
/// `edgeStart[n] ..< edgeStart[n + 1]`, with `edgeTarget` and `edgeOffset` (byte offset
/// in the source block, plus `CPerfHeapScan_Edge*` flags in the top bits).
struct HeapGraph {
  /// For each node, in address order: an index into the recording's `liveBlocks`, or
  /// `recordedCount + i` for its `preexistingBlocks[i]` (a holder: scanned for what it
  /// keeps alive, never reported, without edges of its own). Empty when the nodes are the
  /// live blocks in their own order (listed in address order, no holders): a 16 M-block
  /// heap is spared 64 MB. Read it through `blockIndex(of:)`.
  var blockIndex: [UInt32]
  /// Nodes with `blockIndex` below this are blocks of the recording.
  var recordedCount: Int
  var edgeStart: GraphColumn<UInt32>
  var edgeTarget: GraphColumn<UInt32>
  var edgeOffset: GraphColumn<UInt32>
  /// `CPerfHeapScan_Mark*` per node.
  var marks: GraphColumn<UInt8>
  /// With `Options.recordRootSources`: the address of the root word pointing into each
  /// node a root points into (few of a big heap's millions: a map, not an array). Empty
  /// otherwise.
  var rootSources: [Int: UInt] = [:]
  var threadsScanned: Int
  var unscannedThreads: Int
  /// Threads read from the system call they wait in (they did not park).
  var blockedThreads = 0
  /// Root words not followed because they still held their value from the snapshot.
  var staleWords = 0
  /// Words that named a block but cannot hold a reference by their object's type's layout
  /// (padding, an enum's tag, a number), not followed.
  var layoutWords = 0
  /// Words in the free part of Swift Concurrency's task allocator slabs that named a block,
  /// not followed (`scan`'s `readsTaskSlabs`).
  var taskSlabWords = 0
  /// Blocks freed between the listing and the scan read from the copy of their words taken
  /// when they were freed (`CPerfAlloc_keepFreedWords`).
  var keptFreedBlocks = 0
  /// Blocks freed between the listing and the scan, left out (`Options.leavesOutFreedBlocks`).
  var freedBlocks = 0
  /// Frees the log could not hold: blocks they freed may have been scanned (0 normally).
  var freesNotLogged = 0
  var rootBytes: Int
  var scannedBytes: Int
  /// Bytes the C scanner mapped (index, edge buffer, marks) at its peak.
  var scannerBytes: Int
  var scanNanoseconds: UInt64

  var nodeCount: Int { blockIndex.isEmpty ? marks.count : blockIndex.count }

  /// Where node `node`'s block is (see `blockIndex`).
  func blockIndex(of node: Int) -> Int { blockIndex.isEmpty ? node : Int(blockIndex[node]) }
  var edgeCount: Int { edgeTarget.count }

  struct Options {
    var scanGlobals = true
    var scanThreads = true
    /// 0: SIGPROF (see CPerfHeapScan_Options).
    var signalNumber: Int32 = 0
    var parkTimeoutMilliseconds: Int32 = 500
    /// Fill `rootSources` (the root word that keeps each root block alive): what a
    /// retainer path starts from (8 bytes a block).
    var recordRootSources = true
    /// Whether the calling thread's stack and registers are roots (see
    /// `CPerfHeapScan_Options.skipCallerStack`).
    var scanCallerStack = true
    /// Taken when the recording started (before any of `blocks` existed): root words
    /// unchanged since are not references to them.
    var snapshot: HeapSnapshot?
    /// Leave out the blocks freed since they were listed, as `AllocationRecorder.watchFrees`
    /// logged them (see `CPerfAlloc_watchFrees`): their addresses may belong to other blocks
    /// by now.
    var leavesOutFreedBlocks = false
  }

  /// The fake metadata pointer Swift Concurrency puts at the start of its task allocator's
  /// slabs, which it publishes for debuggers (`_swift_concurrency_debug_asyncTaskSlabMetadata`
  /// holds its address). Looked up once, when a recording with leaks starts (`Recording`):
  /// a lookup on the way to a check left words on the scenario's stack, a root of the
  /// check, that kept the newest leaked cycle reachable in every check of
  /// `cycles-checked-at-marks`.
  static let taskSlabMetadata: UInt? = {
    // A null handle is glibc's RTLD_DEFAULT: every image loaded in the global scope.
    guard let symbol = dlsym(nil, "_swift_concurrency_debug_asyncTaskSlabMetadata") else { return nil }
    let value = symbol.load(as: UInt.self)
    return value == 0 ? nil : value
  }()

  /// Whether the recorder's listing is, word for word, what the C scan reads.
  static let scansListingInPlace =
    RecordedBlock.hasListingLayout && MemoryLayout<CPerfAlloc_Block>.stride == MemoryLayout<CPerfHeapScan_Block>.stride
    && MemoryLayout<CPerfAlloc_Block>.offset(of: \.addressWord)
      == MemoryLayout<CPerfHeapScan_Block>.offset(of: \.addressWord)
    && MemoryLayout<CPerfAlloc_Block>.offset(of: \.metadataWord)
      == MemoryLayout<CPerfHeapScan_Block>.offset(of: \.metadataWord)
    && MemoryLayout<CPerfAlloc_Block>.offset(of: \.sizeWord) == MemoryLayout<CPerfHeapScan_Block>.offset(of: \.sizeWord)

  /// The order of the scan's blocks and, unless the listing is scanned where it lies (in
  /// address order, no holders: a big heap's case), the blocks in that order with the
  /// holders flagged.
  @inline(never)
  private static func prepare(
    _ blocks: [RecordedBlock], holders: [RecordedBlock]
  ) -> (order: [UInt32], copy: [CPerfHeapScan_Block]?) {
    let recordedCount = blocks.count
    let total = blocks.count + holders.count
    func block(_ index: Int) -> RecordedBlock {
      index < recordedCount ? blocks[index] : holders[index - recordedCount]
    }
    func isSorted(_ list: [RecordedBlock]) -> Bool {
      list.withUnsafeBufferPointer { list in
        list.indices.dropFirst().allSatisfy { list[$0 - 1].address <= list[$0].address }
      }
    }
    let order: [UInt32]
    let blocksSorted = isSorted(blocks)
    if holders.isEmpty && blocksSorted {
      if scansListingInPlace { return ([], nil) }
      order = []  // the blocks in their own order
    } else if blocksSorted && isSorted(holders) {
      // The recorder lists its blocks in address order: a merge with the holders replaces
      // the sort (and the sort's pairs, a 16 M-block heap's 256 MB).
      order = [UInt32](unsafeUninitializedCapacity: total) { buffer, count in
        var next = 0
        var nextHolder = 0
        while next < recordedCount || nextHolder < holders.count {
          if nextHolder == holders.count
            || (next < recordedCount && blocks[next].address <= holders[nextHolder].address)
          {
            buffer[count] = UInt32(next)
            next += 1
          } else {
            buffer[count] = UInt32(recordedCount + nextHolder)
            nextHolder += 1
          }
          count += 1
        }
      }
    } else {
      // Sorted as (address, index) pairs side by side: comparing through the index into
      // `blocks` missed the cache on every comparison (the sort was a third of a 4 M-block
      // scan's analysis). The pairs are gone before the scan's arrays are made (peak memory).
      var keyed = [(address: UInt, index: UInt32)](unsafeUninitializedCapacity: total) { buffer, count in
        for index in 0..<total { buffer[index] = (block(index).address, UInt32(index)) }
        count = total
      }
      keyed.sort { $0.address < $1.address || ($0.address == $1.address && $0.index < $1.index) }
      order = keyed.map(\.index)
    }
    let copy = [CPerfHeapScan_Block](unsafeUninitializedCapacity: total) { buffer, count in
      blocks.withUnsafeBufferPointer { listed in
        holders.withUnsafeBufferPointer { held in
          order.withUnsafeBufferPointer { order in
            for position in 0..<total {
              let index = order.isEmpty ? position : Int(order[position])
              let isHolder = index >= recordedCount
              let words = (isHolder ? held[index - recordedCount] : listed[index]).listingWords
              let holderBit = isHolder ? CPerfHeapScan_BlockHolderBit : 0
              (buffer.baseAddress! + position).initialize(
                to: CPerfHeapScan_Block(
                  addressWord: words.addressWord, metadataWord: words.metadataWord,
                  sizeWord: words.sizeWord & ~CPerfHeapScan_BlockHolderBit | holderBit))
            }
          }
        }
      }
      count = total
    }
    return (order, copy)
  }

  /// Freed since the listing: gone, so neither leaked nor reachable.
  static func isFreed(_ mark: UInt8) -> Bool { mark & UInt8(CPerfHeapScan_MarkFreed) != 0 }

  static func isRoot(_ mark: UInt8) -> Bool {
    mark & UInt8(CPerfHeapScan_MarkGlobalRoot | CPerfHeapScan_MarkStackRoot | CPerfHeapScan_MarkHeldByHolder) != 0
  }

  func isHolder(_ node: Int) -> Bool { blockIndex(of: node) >= recordedCount }

  static func isSideTable(_ mark: UInt8) -> Bool { mark & UInt8(CPerfHeapScan_MarkSideTable) != 0 }

  /// Scans the process now. Call it while the blocks are still live (right after the
  /// recorder stopped): other threads are parked for the duration of the C scan.
  /// - Parameters:
  ///   - blocks: the recording's blocks, the nodes that can be reported.
  ///   - holders: blocks allocated before the recording: what they point to is alive.
  ///   - arrayStorage: metadata of Swift array buffers, with their element stride (0:
  ///     unknown): only their live elements are scanned.
  /// The allocator's malloc_usable_size, for an allocator other than glibc (jemalloc,
  /// tcmalloc: they take no lock there); nil for glibc's, whose chunk headers the scan reads.
  private static func foreignUsableSize() -> (@convention(c) (UnsafeMutableRawPointer?) -> Int)? {
    var allocator = CPerfAlloc_Allocator()
    CPerfAlloc_nextAllocator(&allocator)
    return allocator.isGlibc != 0 ? nil : { malloc_usable_size($0) }
  }

  static func scan(
    blocks: [RecordedBlock], holders: [RecordedBlock] = [], arrayStorage: [UInt: Int] = [:],
    layouts: ReferenceLayouts = ReferenceLayouts(), options: Options = Options(), readsTaskSlabs: Bool = true
  ) throws -> HeapGraph {
    let started = DispatchFreeClock.now()
    // Everything that handles block addresses runs in callees whose frames the C scan
    // scrubs: this frame holds no address a conservative stack scan could mistake for a root.
    let recordedCount = blocks.count
    var (order, copy) = prepare(blocks, holders: holders)
    let arrayTypes = arrayStorage.map { CPerfHeapScan_ArrayStorage(metadata: UInt64($0.key), stride: UInt64($0.value)) }
      .sorted { $0.metadata < $1.metadata }
    // prepare's frames (block addresses in spill slots) lie where the C scan's frame will:
    // zero them first, or its padding may carry one into the scan as a stack root.
    CPerfHeapScan_scrubStack(65536)
    var cOptions = CPerfHeapScan_Options(
      scanGlobals: options.scanGlobals ? 1 : 0, scanThreads: options.scanThreads ? 1 : 0,
      signalNumber: options.signalNumber, parkTimeoutMs: options.parkTimeoutMilliseconds,
      recordRootSources: options.recordRootSources ? 1 : 0, skipCallerStack: options.scanCallerStack ? 0 : 1,
      snapshot: nil, freedSinceListing: options.leavesOutFreedBlocks ? CPerfAlloc_watchedFrees : nil,
      layouts: nil, layoutCount: UInt64(layouts.entries.count), layoutBits: nil, arrayStorage: nil,
      arrayStorageCount: 0,
      usableSize: foreignUsableSize(), recorderMemoryStarts: nil, recorderMemoryEnds: nil, recorderMemoryCount: 0,
      taskSlabMetadata: readsTaskSlabs ? UInt64(HeapGraph.taskSlabMetadata ?? 0) : 0,
      keptFreedWords: options.leavesOutFreedBlocks ? CPerfAlloc_keptFreedWords : nil
    )
    // The Time Profiler's tables and buffers copy the program's registers and stack words:
    // no root (see CPerfSampler_ownMemory).
    let capacity = Int(CPerfSampler_OwnMemoryRanges)
    var recorderStarts = [UInt64](repeating: 0, count: capacity)
    var recorderEnds = [UInt64](repeating: 0, count: capacity)
    let recorderCount = min(Int(CPerfSampler_ownMemory(&recorderStarts, &recorderEnds, UInt32(capacity))), capacity)
    var result = CPerfHeapScan_Result()
    let status = withExtendedLifetime(options.snapshot) {
      withUnsafePointer(to: options.snapshot?.raw ?? CPerfHeapScan_Snapshot()) { snapshot in
        cOptions.snapshot = options.snapshot == nil ? nil : snapshot
        return layouts.entries.withUnsafeBufferPointer { entries in
          layouts.bits.withUnsafeBufferPointer { bits in
            cOptions.layouts = entries.baseAddress
            cOptions.layoutBits = bits.baseAddress
            return arrayTypes.withUnsafeBufferPointer { arrayTypes in
              cOptions.arrayStorage = arrayTypes.baseAddress
              cOptions.arrayStorageCount = UInt64(arrayTypes.count)
              return recorderStarts.withUnsafeBufferPointer { starts in
                recorderEnds.withUnsafeBufferPointer { ends in
                  cOptions.recorderMemoryStarts = starts.baseAddress
                  cOptions.recorderMemoryEnds = ends.baseAddress
                  cOptions.recorderMemoryCount = UInt64(recorderCount)
                  if let copy {
                    return copy.withUnsafeBufferPointer { buffer in
                      CPerfHeapScan_scan(buffer.baseAddress, UInt64(buffer.count), &cOptions, &result)
                    }
                  }
                  return blocks.withUnsafeBufferPointer { listed in
                    listed.withMemoryRebound(to: CPerfHeapScan_Block.self) { buffer in
                      CPerfHeapScan_scan(buffer.baseAddress, UInt64(buffer.count), &cOptions, &result)
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
    defer { CPerfHeapScan_freeResult(&result) }
    guard status == 0 else {
      throw HeapScanError(call: result.call.map { String(cString: $0) } ?? "scan", errnoValue: status)
    }
    let nodeCount = copy?.count ?? blocks.count
    let scannerBytes = Int(result.extraBytes) + (copy?.count ?? 0) * MemoryLayout<CPerfHeapScan_Block>.stride
    copy = nil
    // The edges stay where the scan wrote them, in the form the graph reads.
    let edgeStart = GraphColumn(taking: &result.edgeStart)
    let edgeTarget = GraphColumn(taking: &result.edgeTargets)
    let edgeOffset = GraphColumn(taking: &result.edgeOffsets)
    var rootSources: [Int: UInt] = [:]
    if let sources = result.rootSources, let marks = result.marks {
      // A source is written with a root's mark: the marks say which to read, and the
      // sources' pages no root touched are never mapped (16 M blocks: 128 MB).
      for node in 0..<nodeCount where isRoot(marks[node]) && sources[node] != 0 {
        rootSources[node] = UInt(sources[node])
      }
    }
    let marks = GraphColumn(takingMarksOf: &result, count: nodeCount)
    return HeapGraph(
      blockIndex: order, recordedCount: recordedCount, edgeStart: edgeStart, edgeTarget: edgeTarget,
      edgeOffset: edgeOffset,
      marks: marks, rootSources: rootSources,
      threadsScanned: Int(result.threadCount), unscannedThreads: Int(result.unscannedThreads),
      blockedThreads: Int(result.blockedThreads), staleWords: Int(result.staleWords),
      layoutWords: Int(result.layoutWords), taskSlabWords: Int(result.taskSlabWords),
      keptFreedBlocks: Int(result.keptFreedBlocks),
      freedBlocks: Int(result.freedBlocks), freesNotLogged: Int(result.freesNotLogged),
      rootBytes: Int(result.rootBytes),
      scannedBytes: Int(result.scannedBytes),
      scannerBytes: scannerBytes, scanNanoseconds: DispatchFreeClock.now() - started)
  }
}

/// CLOCK_MONOTONIC in nanoseconds.
enum DispatchFreeClock {
  static func now() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
  }
}
