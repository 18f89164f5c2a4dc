import CPerfAlloc
import CPerfHeapScan

/// The words of every live block when a recording starts (see `CPerfHeapScan_Snapshot`).
/// Two guards against words that name a reused address (a struct's padding copied from the
/// stack, a C structure's dangling pointer) and would keep a leaked block looking
/// reachable:
/// - a word of an older Swift object that still holds its value from then cannot be a
///   reference to a block the recording allocated later;
/// - the addresses such words named without naming a live block (dangling pointers, in
///   blocks and globals) are kept off the blocks the recording allocates.
final class HeapSnapshot {
  fileprivate(set) var raw = CPerfHeapScan_Snapshot()

  private init() {}

  /// Takes the snapshot; nil unless every block has been tracked from the process's start
  /// (`PERFHARNESS_TRACK_ALL_BLOCKS`) and no recording has started yet. Call it right
  /// before the allocation recorder starts.
  static func take() -> HeapSnapshot? {
    guard CPerfAlloc_liveBlocksBeforeSession(nil, 0) > 0 else { return nil }
    return take(liveBlocks: CPerfAlloc_liveBlocksBeforeSession)
  }

  /// Takes a snapshot of the blocks `liveBlocks` lists (and the image segments).
  static func take(
    liveBlocks: @convention(c) (UnsafeMutablePointer<UInt64>?, UInt64) -> UInt64
  ) -> HeapSnapshot? {
    // Allocated before the snapshot: a holder like any other older block.
    let snapshot = HeapSnapshot()
    let status = CPerfHeapScan_takeSnapshot(liveBlocks, &snapshot.raw)
    return status == 0 && snapshot.raw.rangeCount > 0 ? snapshot : nil
  }

  private var reserved = false

  /// Keeps the blocks the recording allocates off the addresses that dangling pointers
  /// named at the snapshot (`CPerfAlloc_reserveAddresses`). Call it right before the
  /// allocation recorder starts; release after the scan.
  func reserveDanglingAddresses() {
    guard raw.danglingCount > 0 else { return }
    CPerfAlloc_reserveAddresses(raw.dangling, raw.danglingCount)
    reserved = true
  }

  /// Frees the blocks held aside; what was reserved and held, or nil if nothing was.
  func releaseDanglingAddresses() -> LeaksReport.DanglingAddresses? {
    guard reserved else { return nil }
    reserved = false
    var out = CPerfAlloc_Reserved()
    CPerfAlloc_releaseReservedAddresses(&out)
    return LeaksReport.DanglingAddresses(
      reserved: Int(out.addresses), blocksHeldAside: Int(out.heldBlocks), bytesHeldAside: Int(out.heldBytes),
      notAvoided: Int(out.notAvoided))
  }

  /// Bytes the snapshot maps.
  var mappedBytes: Int { Int(raw.rangeBytes + raw.wordBytes) }

  deinit {
    if reserved {
      var out = CPerfAlloc_Reserved()
      CPerfAlloc_releaseReservedAddresses(&out)
    }
    CPerfHeapScan_freeSnapshot(&raw)
  }
}
