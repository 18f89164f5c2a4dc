@_spi(Reflection) import Swift

/// How a class instance's stored property holds its value.
enum FieldOwnership: String, Sendable {
  case strong
  case weak
  case unowned
  case unownedUnsafe
}

/// A stored property of a class instance, found in its type's field metadata.
struct FieldInfo: Sendable, Hashable {
  var name: String
  var offset: Int
  var typeName: String
  var ownership: FieldOwnership
  /// Bytes the stored value takes (`MemoryLayout.size` of its type).
  var size: Int = 8
}

private func storedSize<T>(_: T.Type) -> Int { MemoryLayout<T>.size }

/// Reads the stored-property layout of Swift classes from their metadata: names and
/// offsets from the runtime's reflection (`_forEachField`, superclass fields included),
/// reference ownership (`weak`, `unowned`) from the field descriptors' mangled type names,
/// which end in `Xw`, `Xo` or `Xu` for those.
struct FieldLayoutReader {
  private var cache: [UInt: [FieldInfo]] = [:]

  /// `metadata` must be validated class metadata (see `SwiftMetadataNamer`).
  mutating func fields(ofClassMetadata metadata: UInt) -> [FieldInfo] {
    if let cached = cache[metadata] { return cached }
    var ownership: [String: FieldOwnership] = [:]
    Self.readOwnership(classMetadata: metadata, into: &ownership)
    var fields: [FieldInfo] = []
    let type = unsafeBitCast(UnsafeRawPointer(bitPattern: metadata)!, to: Any.Type.self)
    _ = _forEachField(of: type, options: _EachFieldOptions(rawValue: 1)) { name, offset, fieldType, _ in  // .classType
      let fieldName = String(cString: name)
      fields.append(
        FieldInfo(
          name: fieldName, offset: offset, typeName: _typeName(fieldType, qualified: false),
          ownership: ownership[fieldName] ?? .strong, size: _openExistential(fieldType, do: storedSize)))
      return true
    }
    fields.sort { $0.offset < $1.offset }
    cache[metadata] = fields
    return fields
  }

  /// The field that holds `offset` (a pointer-sized slot inside it); nil past the last
  /// stored property (tail-allocated elements of a buffer class).
  mutating func field(ofClassMetadata metadata: UInt, at offset: Int) -> FieldInfo? {
    let fields = fields(ofClassMetadata: metadata)
    var best: FieldInfo?
    for field in fields where field.offset <= offset { best = field }
    guard let best, offset < best.offset + max(best.size, 8) else { return nil }
    return best
  }

  /// The target of a 32-bit relative pointer at `address` (the runtime's descriptors use
  /// them); nil for a null one.
  static func relative(_ address: UInt) -> UInt? {
    let delta = Int(UnsafeRawPointer(bitPattern: address)!.load(as: Int32.self))
    if delta == 0 { return nil }
    return UInt(bitPattern: Int(bitPattern: address) &+ delta)
  }

  /// Walks the class and its superclasses (Swift classes only: the descriptor must say so).
  private static func readOwnership(classMetadata: UInt, into ownership: inout [String: FieldOwnership]) {
    var metadata = classMetadata
    var depth = 0
    while metadata != 0, depth < 64 {
      depth += 1
      let raw = UnsafeRawPointer(bitPattern: metadata)!
      let kind = raw.load(as: UInt.self)
      guard kind == 0 || kind >= 0x800 else { return }
      let description = raw.load(fromByteOffset: 40, as: UInt.self)
      guard description != 0, description & 3 == 0 else { return }
      let flags = UnsafeRawPointer(bitPattern: description)!.load(as: UInt32.self)
      guard flags & 0x1F == 16 else { return }  // ContextDescriptorKind.class
      if let fieldDescriptor = relative(description + 16) {
        let fd = UnsafeRawPointer(bitPattern: fieldDescriptor)!
        let recordSize = Int(fd.load(fromByteOffset: 10, as: UInt16.self))
        let count = Int(fd.load(fromByteOffset: 12, as: UInt32.self))
        if recordSize >= 12, count < 100_000 {
          for index in 0..<count {
            let record = fieldDescriptor + 16 + UInt(index * recordSize)
            guard let nameAddress = relative(record + 8), let typeAddress = relative(record + 4) else { continue }
            let name = String(cString: UnsafePointer<CChar>(bitPattern: nameAddress)!)
            ownership[name] = ownershipSuffix(mangledTypeName: typeAddress)
          }
        }
      }
      metadata = raw.load(fromByteOffset: 8, as: UInt.self)  // superclass
    }
  }

  static func mangledNameLength(_ address: UInt) -> Int? {
    MangledTypeName(UnsafePointer<UInt8>(bitPattern: address)!)?.length
  }

  /// The last two characters of a mangled type name, skipping symbolic references
  /// (0x01-0x17 take 4 more bytes, 0x18-0x1F take 8).
  private static func ownershipSuffix(mangledTypeName address: UInt) -> FieldOwnership {
    let bytes = UnsafePointer<UInt8>(bitPattern: address)!
    var index = 0
    var last: UInt8 = 0
    var previous: UInt8 = 0
    while index < 4096 {
      let byte = bytes[index]
      if byte == 0 { break }
      if byte <= 0x17 {
        index += 5
        previous = 0
        last = 0
        continue
      }
      if byte <= 0x1F {
        index += 9
        previous = 0
        last = 0
        continue
      }
      previous = last
      last = byte
      index += 1
    }
    guard previous == UInt8(ascii: "X") else { return .strong }
    switch last {
    case UInt8(ascii: "w"): return .weak
    case UInt8(ascii: "o"): return .unowned
    case UInt8(ascii: "u"): return .unownedUnsafe
    default: return .strong
    }
  }
}
