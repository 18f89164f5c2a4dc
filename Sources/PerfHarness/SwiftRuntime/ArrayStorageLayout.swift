/// The element stride of Swift array buffers (`_ContiguousArrayStorage<Element>`), read
/// from their metadata, so the heap scan reads a buffer's live elements and not a word
/// more: the chunk's slack past the bytes the buffer asked for holds whatever was there
/// before, and a stale word there kept a leaked object "reachable".
enum ArrayStorageLayout {
  static let storagePrefix = "Swift._ContiguousArrayStorage<"

  /// `metadata` must be validated class metadata named `name` (a category name, as
  /// `swift_getTypeName` spells it). Returns nil unless the generic argument found in the
  /// metadata is named as `name` says: a layout this reader does not know is never guessed.
  static func elementStride(storageMetadata metadata: UInt, name: String) -> Int? {
    guard name.hasPrefix(storagePrefix), name.hasSuffix(">") else { return nil }
    let elementName = String(name.dropFirst(storagePrefix.count).dropLast())
    let raw = UnsafeRawPointer(bitPattern: metadata)!
    // Class metadata without Objective-C interop: the type descriptor at +40.
    let description = raw.load(fromByteOffset: 40, as: UInt.self)
    guard description != 0, description & 3 == 0 else { return nil }
    let descriptor = UnsafeRawPointer(bitPattern: description)!
    let flags = descriptor.load(as: UInt32.self)
    let isClass = flags & 0x1F == 16
    let isGeneric = flags & 0x80 != 0
    // Kind-specific flags: a resilient superclass (bit 13) or negative immediate members
    // (bit 12) put the generic arguments elsewhere.
    let kindFlags = flags >> 16
    guard isClass, isGeneric, kindFlags & (1 << 13) == 0, kindFlags & (1 << 12) == 0 else { return nil }
    let positiveWords = Int(descriptor.load(fromByteOffset: 28, as: UInt32.self))
    let immediateMembers = Int(descriptor.load(fromByteOffset: 32, as: UInt32.self))
    let argumentWord = positiveWords - immediateMembers
    guard argumentWord > 0, argumentWord < 1024 else { return nil }
    let argument = raw.load(fromByteOffset: argumentWord * 8, as: UInt.self)
    guard argument != 0, argument & 7 == 0 else { return nil }
    let element = unsafeBitCast(UnsafeRawPointer(bitPattern: argument)!, to: Any.Type.self)
    guard _typeName(element, qualified: true) == elementName else { return nil }
    return _openExistential(element, do: strideOf)
  }
}

private func strideOf<T>(_: T.Type) -> Int { MemoryLayout<T>.stride }
