import Testing

@testable import PerfHarness

/// The heap scan reads an array buffer up to its last element, by the stride read from the
/// buffer's metadata; a wrong stride reads stale slack or skips live elements.
struct ArrayStorageLayoutTests {
  struct Wide {
    var a: Int
    var b: String
    var c: AnyObject?
    var d: Bool
  }

  private static func storage<T>(_ array: [T]) -> (metadata: UInt, name: String) {
    let buffer = unsafeBitCast(array, to: UnsafeRawPointer.self)
    let metadata = buffer.load(as: UInt.self)
    let type = unsafeBitCast(UnsafeRawPointer(bitPattern: metadata)!, to: Any.Type.self)
    return (metadata, _typeName(type, qualified: true))
  }

  private static func stride<T>(of array: [T]) -> Int? {
    let (metadata, name) = storage(array)
    return ArrayStorageLayout.elementStride(storageMetadata: metadata, name: name)
  }

  @Test func strideOfEachElementType() {
    #expect(Self.stride(of: [1, 2, 3]) == MemoryLayout<Int>.stride)
    #expect(Self.stride(of: ["a", "b"]) == MemoryLayout<String>.stride)
    #expect(Self.stride(of: [UInt8(1)]) == 1)
    #expect(Self.stride(of: [Wide(a: 1, b: "", c: nil, d: true)]) == MemoryLayout<Wide>.stride)
    #expect(Self.stride(of: [{ () in }]) == MemoryLayout<() -> Void>.stride)
  }

  @Test func aNameThatDoesNotMatchTheMetadataGivesNoStride() {
    let (metadata, _) = Self.storage([1, 2, 3])
    #expect(
      ArrayStorageLayout.elementStride(storageMetadata: metadata, name: "Swift._ContiguousArrayStorage<Swift.String>")
        == nil)
    #expect(ArrayStorageLayout.elementStride(storageMetadata: metadata, name: "Swift.Int") == nil)
  }
}
