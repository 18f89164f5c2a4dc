import CPerfHeapScan
import Testing

@testable import PerfHarness

#if canImport(Glibc)
  import Glibc
#endif

/// The C scan reads the recorder's listing where it lies (blocks in address order, no
/// holders) and a copy in address order otherwise: both must give one graph. Blocks here are
/// 64-byte slices of one allocation, not scanned from any root (no globals, no threads).
@Suite struct HeapGraphTests {
  static func block(_ address: UnsafeMutableRawPointer, _ offset: Int, size: Int = 64) -> RecordedBlock {
    RecordedBlock(
      address: UInt(bitPattern: address + offset), size: size, metadata: 0, isSwiftObject: false, stackID: 0,
      generation: 0)
  }

  static var noRoots: HeapGraph.Options {
    var options = HeapGraph.Options()
    options.scanGlobals = false
    options.scanThreads = false
    options.recordRootSources = false
    return options
  }

  /// Every edge as (source address, target address, offset in the source).
  static func edges(_ graph: HeapGraph, _ blocks: [RecordedBlock]) -> Set<[UInt]> {
    var edges: Set<[UInt]> = []
    for node in 0..<graph.nodeCount {
      for edge in Int(graph.edgeStart[node])..<Int(graph.edgeStart[node + 1]) {
        let target = Int(graph.edgeTarget[edge])
        edges.insert([
          blocks[graph.blockIndex(of: node)].address, blocks[graph.blockIndex(of: target)].address,
          UInt(graph.edgeOffset[edge] & UInt32(CPerfHeapScan_EdgeOffsetMask)),
        ])
      }
    }
    return edges
  }

  @Test func theListingInPlaceAndACopyGiveOneGraph() throws {
    let memory = try #require(calloc(1, 192))
    defer { free(memory) }
    memory.storeBytes(of: UInt(bitPattern: memory + 64), toByteOffset: 16, as: UInt.self)  // A -> B
    memory.storeBytes(of: UInt(bitPattern: memory + 128), toByteOffset: 64 + 24, as: UInt.self)  // B -> C
    let sorted = [Self.block(memory, 0), Self.block(memory, 64), Self.block(memory, 128)]
    let expected: Set<[UInt]> = [
      [sorted[0].address, sorted[1].address, 16], [sorted[1].address, sorted[2].address, 24],
    ]
    #expect(HeapGraph.scansListingInPlace, "the recorder's listing and the scan's blocks have one layout")
    let inPlace = try HeapGraph.scan(blocks: sorted, options: Self.noRoots)
    #expect(inPlace.blockIndex.isEmpty, "in address order: the nodes are the listing's blocks")
    #expect(Self.edges(inPlace, sorted) == expected)
    let reversed = Array(sorted.reversed())
    let copied = try HeapGraph.scan(blocks: reversed, options: Self.noRoots)
    #expect(copied.blockIndex == [2, 1, 0])
    #expect(Self.edges(copied, reversed) == expected)
  }

  /// A block that starts inside the one before it (which a recorder never lists) is marked
  /// and not scanned: its words would be read as two blocks' at once.
  @Test func aBlockInsideTheOneBeforeItIsNotScanned() throws {
    let memory = try #require(calloc(1, 192))
    defer { free(memory) }
    memory.storeBytes(of: UInt(bitPattern: memory + 128), toByteOffset: 32 + 40, as: UInt.self)  // past A's end
    let blocks = [Self.block(memory, 0), Self.block(memory, 32), Self.block(memory, 128)]
    let graph = try HeapGraph.scan(blocks: blocks, options: Self.noRoots)
    #expect(graph.marks[1] & UInt8(CPerfHeapScan_MarkOverlapping) != 0)
    #expect(graph.marks[0] & UInt8(CPerfHeapScan_MarkOverlapping) == 0)
    #expect(Self.edges(graph, blocks).isEmpty)
    // The same words in a block of their own are scanned.
    let apart = [Self.block(memory, 0, size: 32), Self.block(memory, 32), Self.block(memory, 128)]
    #expect(
      Self.edges(try HeapGraph.scan(blocks: apart, options: Self.noRoots), apart) == [
        [apart[1].address, apart[2].address, 40]
      ])
  }

  /// Holders go into the copy flagged as such: what they name is held, and they have no
  /// edges of their own.
  @Test func aHolderInTheCopyHoldsWhatItNames() throws {
    let memory = try #require(calloc(1, 192))
    defer { free(memory) }
    memory.storeBytes(of: UInt(bitPattern: memory + 128), toByteOffset: 64 + 8, as: UInt.self)  // holder -> C
    let blocks = [Self.block(memory, 0), Self.block(memory, 128)]
    let graph = try HeapGraph.scan(blocks: blocks, holders: [Self.block(memory, 64)], options: Self.noRoots)
    #expect(graph.nodeCount == 3)
    #expect(graph.isHolder(1) && !graph.isHolder(0) && !graph.isHolder(2))
    #expect(graph.marks[2] & UInt8(CPerfHeapScan_MarkHeldByHolder) != 0)
    #expect(graph.marks[0] & UInt8(CPerfHeapScan_MarkHeldByHolder) == 0)
    #expect(graph.edgeCount == 0)
  }

  /// Swift Concurrency's task allocator keeps popped frames' words in its slabs: a slab
  /// (word 0 the runtime's slab metadata) is read up to its current offset, in a block of
  /// its own (a slab malloc gave) and inside another (a task's first slab, in the task's
  /// allocation). Its link to the next slab is followed; what lies past the offset is not.
  @Test func aTaskAllocatorSlabIsReadUpToItsCurrentOffset() throws {
    let metadata = try #require(HeapGraph.taskSlabMetadata, "Swift Concurrency publishes its slabs' metadata")
    let memory = try #require(calloc(1, 1024 + 512 + 4 * 64))
    defer { free(memory) }
    func store(_ target: UnsafeMutableRawPointer, at offset: Int) {
      memory.storeBytes(of: UInt(bitPattern: target), toByteOffset: offset, as: UInt.self)
    }
    let (live, stale, next, taskLive) = (memory + 1536, memory + 1600, memory + 1664, memory + 1728)
    // A slab of its own: 992 bytes of payload, 64 in use.
    memory.storeBytes(of: metadata, toByteOffset: 0, as: UInt.self)
    store(next, at: 8)
    memory.storeBytes(of: UInt(992) | UInt(64) << 32, toByteOffset: 16, as: UInt.self)
    store(live, at: 32 + 16)
    store(stale, at: 32 + 64 + 8)
    // A task's first slab, 64 bytes into its 512-byte allocation: 416 bytes, 32 in use.
    let task = 1024
    memory.storeBytes(of: metadata, toByteOffset: task + 64, as: UInt.self)
    memory.storeBytes(of: UInt(416) | UInt(32) << 32, toByteOffset: task + 64 + 16, as: UInt.self)
    store(taskLive, at: task + 8)
    store(taskLive, at: task + 96 + 8)
    store(stale, at: task + 96 + 32)
    store(stale, at: task + 96 + 400)
    let blocks = [
      Self.block(memory, 0, size: 1024), Self.block(memory, task, size: 512), Self.block(memory, 1536),
      Self.block(memory, 1600), Self.block(memory, 1664), Self.block(memory, 1728),
    ]
    let (slabAddress, taskAddress) = (blocks[0].address, blocks[1].address)
    let graph = try HeapGraph.scan(blocks: blocks, options: Self.noRoots)
    #expect(
      Self.edges(graph, blocks) == [
        [slabAddress, blocks[4].address, 8], [slabAddress, blocks[2].address, 48],
        [taskAddress, blocks[5].address, 8], [taskAddress, blocks[5].address, 104],
      ])
    #expect(graph.taskSlabWords == 3)
    // Without the slabs' metadata, the same words are all followed.
    let unknowing = try HeapGraph.scan(blocks: blocks, options: Self.noRoots, readsTaskSlabs: false)
    #expect(Self.edges(unknowing, blocks).count == 7)
    #expect(unknowing.taskSlabWords == 0)
  }
}
