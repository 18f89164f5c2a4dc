import CPerfAlloc
import CPerfSupport
import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// Names Swift heap metadata like Instruments does. Reads only memory that
/// /proc/self/maps says is readable, because a live block's first word is read at stop
/// and could belong to an object whose header was not written yet.
struct SwiftMetadataNamer {
  private var readable: [(start: UInt, end: UInt)] = []
  private var executableImage: [(start: UInt, end: UInt)] = []
  /// Readable mappings of files (images): where every type's context descriptor lies.
  private var images: [(start: UInt, end: UInt)] = []
  private var cache: [UInt: AllocationCategory] = [:]

  init() {
    (readable, executableImage, images) = Self.mappedRanges()
  }

  mutating func category(forMetadata metadata: UInt) -> AllocationCategory {
    if let cached = cache[metadata] { return cached }
    let result = resolve(metadata)
    cache[metadata] = result
    return result
  }

  /// The struct a generic box (heap metadata kind 0x500) holds: its `BoxedType` (at +16),
  /// when it is readable struct metadata whose descriptor is static data of an image and
  /// says it is a struct; nil otherwise.
  func boxedStruct(ofBoxMetadata metadata: UInt) -> UInt? {
    guard isReadable(metadata, 24), load(metadata) == 0x500 else { return nil }
    let boxed = load(metadata + 16)
    guard isReadable(boxed, 16), load(boxed) == 0x200 else { return nil }
    let description = load(boxed + 8)
    guard isReadable(description, 4, alignment: 4), Self.contains(images, description) else { return nil }
    let flags = UnsafeRawPointer(bitPattern: description)!.load(as: UInt32.self)
    return flags & 0x1F == 17 ? boxed : nil  // ContextDescriptorKind.struct
  }

  private func isReadable(_ address: UInt, _ length: UInt, alignment: UInt = 8) -> Bool {
    guard address != 0, address & (alignment - 1) == 0 else { return false }
    let (end, overflow) = address.addingReportingOverflow(length)
    if overflow { return false }
    // Binary search: ranges are sorted and disjoint.
    var low = 0
    var high = readable.count
    while low < high {
      let mid = (low + high) / 2
      if readable[mid].end <= address { low = mid + 1 } else { high = mid }
    }
    return low < readable.count && readable[low].start <= address && end <= readable[low].end
  }

  private func load(_ address: UInt) -> UInt {
    UnsafeRawPointer(bitPattern: address)!.load(as: UInt.self)
  }

  private func resolve(_ metadata: UInt) -> AllocationCategory {
    let unknown = AllocationCategory(name: "Swift object", kind: .unknownSwiftObject)
    guard isReadable(metadata, 8) else { return unknown }
    let kind = load(metadata)
    switch kind {
    case 0, 0x800...:
      // Class metadata: kind 0 without Objective-C interop (an isa pointer with it).
      // Check the nominal type descriptor before handing the pointer to the runtime:
      // without Objective-C interop it follows kind, superclass and 24 bytes of layout.
      guard isReadable(metadata, 48) else { return unknown }
      let description = load(metadata + 40)
      // A class's descriptor is static data of an image: a heap word that merely looks
      // like metadata (a block taken for an object that no longer is one) fails here,
      // before the runtime would follow it.
      guard isReadable(description, 4, alignment: 4), Self.contains(images, description) else { return unknown }
      let flags = UnsafeRawPointer(bitPattern: description)!.load(as: UInt32.self)
      guard flags & 0x1F == 16 else { return unknown }  // ContextDescriptorKind.class
      let type = unsafeBitCast(UnsafeRawPointer(bitPattern: metadata)!, to: Any.Type.self)
      let name = Self.withoutAddresses(_typeName(type, qualified: true))
      // Generic instantiations are made at run time on the heap: only a class whose
      // metadata the executable carries is known to be the program's own.
      let module = String(name.prefix { $0 != "." && $0 != "<" })
      let isApp =
        executableImage.contains { $0.start <= metadata && metadata < $0.end }
        && !CodeOwnership.harnessModules.contains(module)
      return AllocationCategory(name: name, kind: .swiftClass, isApp: isApp)
    case 0x400:
      return AllocationCategory(name: closureContextName(metadata), kind: .closureContext)
    case 0x500:
      return AllocationCategory(name: AllocationCategory.genericBoxName, kind: .swiftBox)
    case 0x501:
      return AllocationCategory(name: "Swift error box", kind: .swiftBox)
    case 0x502:
      return AllocationCategory(name: "Swift task", kind: .swiftBox)
    case 0x503:
      return AllocationCategory(name: "Swift job", kind: .swiftBox)
    default:
      return unknown
    }
  }

  /// "closure context (captures: A, B)" when its capture descriptor names the captured
  /// types, else "closure context". The compiler emits a context's metadata and its
  /// descriptor as static data of an image: a word that merely looks like such metadata
  /// fails here, before the runtime would be asked to resolve names it points to.
  private func closureContextName(_ metadata: UInt) -> String {
    let plain = AllocationCategory.closureContextName
    guard isReadable(metadata, 24), Self.contains(images, metadata) else { return plain }
    let descriptor = ClosureCaptureReader.descriptorAddress(ofContextMetadata: metadata)
    guard isReadable(descriptor, 12, alignment: 4), Self.contains(images, descriptor) else { return plain }
    var reader = ClosureCaptureReader()
    guard let captures = reader.captures(ofContextMetadata: metadata), !captures.isEmpty else { return plain }
    // A generic capture cannot be resolved from the metadata alone, nor anything after it:
    // "…" says the list goes on.
    let declared = ClosureCaptureReader.declaredCount(ofDescriptor: descriptor)
    let names = captures.map { $0.typeName ?? "?" } + (captures.count < declared ? ["…"] : [])
    return plain + " (captures: " + names.joined(separator: ", ") + ")"
  }

  /// Private types print as "(unknown context at $7f…)": the address moves with ASLR, so
  /// without it the same type keeps one name across runs (and baselines can match it).
  static func withoutAddresses(_ name: String) -> String {
    let marker = "unknown context at $"
    guard name.contains(marker) else { return name }
    var result = ""
    var rest = Substring(name)
    while let range = rest.range(of: marker) {
      result += rest[..<range.lowerBound] + "unknown context"
      rest = rest[range.upperBound...].drop { $0.isHexDigit }
    }
    return result + rest
  }

  /// The readable mappings, and those of the running executable's own file, from one read
  /// of /proc/self/maps.
  private static func contains(_ ranges: [(start: UInt, end: UInt)], _ address: UInt) -> Bool {
    var low = 0
    var high = ranges.count
    while low < high {
      let mid = (low + high) / 2
      if ranges[mid].end <= address { low = mid + 1 } else { high = mid }
    }
    return low < ranges.count && ranges[low].start <= address
  }

  private static func mappedRanges() -> (
    readable: [(start: UInt, end: UInt)], executable: [(start: UInt, end: UInt)], images: [(start: UInt, end: UInt)]
  ) {
    var reader = CPerfSupport_MapsReader()
    guard CPerfSupport_mapsOpen(&reader) else { return ([], [], []) }
    defer { CPerfSupport_mapsClose(&reader) }
    let executablePath = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    var ranges: [(start: UInt, end: UInt)] = []
    var executable: [(start: UInt, end: UInt)] = []
    var images: [(start: UInt, end: UInt)] = []
    var mapping = CPerfSupport_Mapping()
    while CPerfSupport_mapsNext(&reader, &mapping) {
      let range = (start: UInt(mapping.start), end: UInt(mapping.end))
      let path = String(cString: mapping.path)
      if let executablePath, path == executablePath { executable.append(range) }
      if mapping.readable {
        ranges.append(range)
        if path.hasPrefix("/") { images.append(range) }
      }
    }
    images.sort { $0.start < $1.start }
    // Adjacent mappings (e.g. an anonymous region the metadata allocator extended) merge,
    // so a structure that straddles two of them still counts as readable.
    var merged: [(start: UInt, end: UInt)] = []
    for range in ranges.sorted(by: { $0.start < $1.start }) {
      if let last = merged.last, last.end >= range.start {
        merged[merged.count - 1].end = max(last.end, range.end)
      } else {
        merged.append(range)
      }
    }
    return (merged, executable, images)
  }
}
