#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A column of `Int32` per node that starts as zeros the kernel supplies (calloc of a big
/// block maps fresh pages without writing them): a page no entry is written to is never
/// touched. For per-node facts that most of a big heap's nodes never get.
final class ZeroedColumn {
  let values: UnsafeMutableBufferPointer<Int32>

  init(count: Int) {
    let memory = count == 0 ? nil : calloc(count, MemoryLayout<Int32>.stride)
    guard let memory else {
      precondition(count == 0, "ZeroedColumn: calloc of \(count) entries failed")
      values = UnsafeMutableBufferPointer(start: nil, count: 0)
      return
    }
    values = UnsafeMutableBufferPointer(start: memory.assumingMemoryBound(to: Int32.self), count: count)
  }

  deinit { free(values.baseAddress) }
}
