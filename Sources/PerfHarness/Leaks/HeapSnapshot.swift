import CPerfAlloc
import CPerfHeapScan

/// The words of every live block when a recording starts (see `CPerfHeapScan_Snapshot`):
/// a word of an older Swift object that still holds its value from then cannot be a
/// reference to a block the recording allocated later. It names a reused address, such as
/// a struct's padding copied from the stack before the recording, and would otherwise keep
/// a leaked block looking reachable.
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

  /// Bytes the snapshot maps.
  var mappedBytes: Int { Int(raw.rangeBytes + raw.wordBytes) }

  deinit { CPerfHeapScan_freeSnapshot(&raw) }
}
