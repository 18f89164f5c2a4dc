import CPerfSupport

/// Blocks the dynamic linker allocated for itself: a dlopen's dependency and search lists
/// (`_dl_map_object_deps`), even for a library that was loaded already. They are held by
/// its link maps, which lie in memory the scan does not read (ld.so's own allocator's), so
/// they would read as leaked on every dlopen; LeakSanitizer takes them as reachable too.
/// Told by the allocation stack's first frame, so only where stacks were recorded.
struct DynamicLinkerBlocks {
  private var verdicts: [UInt: Bool] = [:]

  /// Whether `address` (a return address) lies in the dynamic linker.
  mutating func contains(_ address: UInt) -> Bool {
    if let known = verdicts[address] { return known }
    let inLinker = CPerfSupport_isInDynamicLinker(address)
    verdicts[address] = inLinker
    return inLinker
  }
}
