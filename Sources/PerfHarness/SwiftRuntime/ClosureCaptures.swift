#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A value a closure context holds: its type and where it lies in the context.
struct ClosureCapture: Sendable, Hashable {
  /// Qualified type name; nil when the mangled name needs generic arguments.
  var typeName: String?
  var offset: Int
  var size: Int
}

/// Reads what a closure context captures from its heap metadata (kind 0x400): a 32-bit
/// offset of the first capture at metadata+8 and the compiler's capture descriptor at
/// metadata+16 (capture, metadata-source and binding counts, then one relative pointer to
/// a mangled type name per capture). Bindings (generic metadata) come first in the context.
struct ClosureCaptureReader {
  private var cache: [UInt: [ClosureCapture]?] = [:]

  /// nil when the descriptor is missing or a capture's type cannot be resolved (then the
  /// layout after it is unknown too).
  mutating func captures(ofContextMetadata metadata: UInt) -> [ClosureCapture]? {
    if let cached = cache[metadata] { return cached }
    let result = Self.read(metadata)
    cache[metadata] = result
    return result
  }

  /// The context's capture descriptor: the compiler's static data, named at metadata+16.
  static func descriptorAddress(ofContextMetadata metadata: UInt) -> UInt {
    UnsafeRawPointer(bitPattern: metadata)!.load(fromByteOffset: 16, as: UInt.self)
  }

  /// How many captures the descriptor declares; `captures` stops short of it at the first
  /// generic one.
  static func declaredCount(ofDescriptor descriptor: UInt) -> Int {
    Int(UnsafeRawPointer(bitPattern: descriptor)!.load(as: UInt32.self))
  }

  private static func read(_ metadata: UInt) -> [ClosureCapture]? {
    guard let raw = UnsafeRawPointer(bitPattern: metadata), raw.load(as: UInt.self) == 0x400 else { return nil }
    let firstOffset = Int(raw.load(fromByteOffset: 8, as: UInt32.self))
    let descriptorAddress = descriptorAddress(ofContextMetadata: metadata)
    guard let descriptor = UnsafeRawPointer(bitPattern: descriptorAddress) else { return nil }
    let captureCount = declaredCount(ofDescriptor: descriptorAddress)
    let metadataSourceCount = Int(descriptor.load(fromByteOffset: 4, as: UInt32.self))
    let bindingCount = Int(descriptor.load(fromByteOffset: 8, as: UInt32.self))
    guard captureCount < 256, bindingCount < 256 else { return nil }
    // A context that carries generic metadata, or says where to find it, belongs to
    // generic code: its captures' names may need that generic environment to resolve.
    let isGeneric = bindingCount > 0 || metadataSourceCount > 0
    var offset = firstOffset + bindingCount * MemoryLayout<UInt>.size
    var captures: [ClosureCapture] = []
    for index in 0..<captureCount {
      let field = descriptor + 12 + index * 4
      let relative = Int(field.load(as: Int32.self))
      guard relative != 0, let name = MangledTypeName((field + relative).assumingMemoryBound(to: UInt8.self)) else {
        return nil
      }
      // Generic captures need the context's bindings to resolve: name what came before.
      guard !(isGeneric && name.mayNeedGenericContext),
        let type = typeByMangledName(name.bytes, length: UInt(name.length), genericContext: nil, genericArguments: nil)
      else {
        return captures.isEmpty ? nil : captures
      }
      let (size, alignment) = _openExistential(type, do: layout)
      offset = (offset + alignment - 1) / alignment * alignment
      captures.append(ClosureCapture(typeName: _typeName(type, qualified: true), offset: offset, size: size))
      offset += size
    }
    return captures
  }
}

private func layout<T>(_: T.Type) -> (Int, Int) { (MemoryLayout<T>.size, MemoryLayout<T>.alignment) }

/// The runtime's `swift_getTypeByMangledNameInContext` (swiftcall; with four pointer-sized
/// arguments and a pointer result it passes them in the same registers as the C
/// convention on x86_64), looked up once: symbolic references in a mangled name are
/// relative to where the name lies, so it must read the name in place.
private let typeByMangledNameFunction:
  (@convention(c) (UnsafePointer<UInt8>, UInt, UnsafeRawPointer?, UnsafeRawPointer?) -> UnsafeRawPointer?)? = {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "swift_getTypeByMangledNameInContext") else {
      return nil
    }
    return unsafeBitCast(
      symbol,
      to: (@convention(c) (UnsafePointer<UInt8>, UInt, UnsafeRawPointer?, UnsafeRawPointer?) -> UnsafeRawPointer?)
        .self)
  }()

private func typeByMangledName(
  _ name: UnsafePointer<UInt8>, length: UInt, genericContext: UnsafeRawPointer?,
  genericArguments: UnsafeRawPointer?
) -> Any.Type? {
  guard let function = typeByMangledNameFunction,
    let metadata = function(name, length, genericContext, genericArguments)
  else { return nil }
  return unsafeBitCast(metadata, to: Any.Type.self)
}
