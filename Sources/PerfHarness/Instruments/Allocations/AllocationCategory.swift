import CPerfAlloc
import CPerfSupport
import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// What the Allocations instrument groups blocks by, before naming.
enum AllocationCategoryKey: Hashable, Sendable {
  /// A block the Swift runtime allocated for an object; the payload is its metadata.
  case swiftObject(metadata: UInt)
  /// Any other block, by power-of-two size class (see `CPerfAlloc_sizeClass`).
  case malloc(sizeClass: Int)
  /// Frees that no category table had room for (counted, never named).
  case overflow

  /// The C side's freed-aggregate key: even = metadata pointer, odd = size class.
  init(rawKey: UInt64) {
    if rawKey == UInt64.max {
      self = .overflow
    } else if rawKey & 1 == 1 {
      self = .malloc(sizeClass: Int(rawKey >> 1))
    } else {
      self = .swiftObject(metadata: UInt(rawKey))
    }
  }

  init(block size: Int, metadata: UInt, isSwiftObject: Bool) {
    self.init(rawKey: Self.rawKey(block: size, metadata: metadata, isSwiftObject: isSwiftObject))
  }

  /// A block's key in the C side's raw form (see `init(rawKey:)`): cheaper to compare, block
  /// after block, than the enum.
  static func rawKey(block size: Int, metadata: UInt, isSwiftObject: Bool) -> UInt64 {
    if isSwiftObject, metadata != 0, metadata & 7 == 0 { return UInt64(metadata) }
    return UInt64(CPerfAlloc_sizeClass(UInt64(size))) << 1 | 1
  }
}

/// A named category, like a row of Instruments' Allocations summary.
struct AllocationCategory: Hashable, Sendable {
  enum Kind: String, Codable, Sendable {
    /// An instance of a Swift class (generic arguments included in the name).
    case swiftClass
    /// A closure context (heap metadata kind 0x400, HeapLocalVariable).
    case closureContext
    /// Other runtime heap objects: generic boxes, error boxes, tasks, jobs.
    case swiftBox
    /// A block that the runtime allocated as an object but whose type could not be read.
    case unknownSwiftObject
    /// A plain malloc block.
    case malloc
  }

  var name: String
  var kind: Kind
  /// A class of the profiled program itself: its metadata lives in the executable's image
  /// and its module is not the harness's. Library and runtime types are not.
  var isApp = false

  static let overflow = AllocationCategory(name: "Malloc (uncategorized)", kind: .malloc)
  /// A generic box (heap metadata kind 0x500): a value too big for an existential's
  /// inline buffer, or a captured `var` whose type is generic.
  static let genericBoxName = "Swift box"
  /// Every closure context's name starts so; what it captures follows in parentheses.
  static let closureContextName = "closure context"

  /// "Malloc 16 Bytes", "Malloc 32 Bytes", ... "Malloc 512 Bytes", "Malloc 1.00 KiB",
  /// ..., "Malloc 1.00 MiB", ...: the class's upper bound (blocks of (bound/2, bound]
  /// bytes; the first class holds 0...16).
  static func malloc(sizeClass: Int) -> AllocationCategory {
    AllocationCategory(name: "Malloc " + mallocClassLabel(sizeClass), kind: .malloc)
  }

  static func mallocClassLabel(_ sizeClass: Int) -> String {
    let shift = max(0, sizeClass) + 4
    if shift < 10 { return "\(1 << shift) Bytes" }
    if shift < 20 { return "\(1 << (shift - 10)).00 KiB" }
    if shift < 30 { return "\(1 << (shift - 20)).00 MiB" }
    return "\(1 << (shift - 30)).00 GiB"
  }
}
