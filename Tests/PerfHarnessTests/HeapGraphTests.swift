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
}
