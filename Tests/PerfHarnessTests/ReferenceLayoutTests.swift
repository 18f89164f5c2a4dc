import Testing

@testable import PerfHarness

/// The words of a Swift object that its type says cannot hold a reference: what the heap
/// scan does not follow in an object's padding, an enum's tag word and its numbers.
struct ReferenceLayoutTests {
  final class Padded {
    var flag = false  // word 2: a Bool and seven bytes of padding
    var reference: AnyObject?  // word 3
    var count = 0  // word 4
    var maybe: Int? = nil  // words 5 (the payload) and 6 (the tag and padding)
    var closure: () -> Void = {}  // words 7 and 8
    var text = ""  // word 9 count and flags, word 10 the object
  }

  struct Boxed {
    var number = 0  // box word 2
    var flag = true  // box word 3
    var reference: AnyObject?  // box word 4
    var maybe: Int? = 7  // box words 5 and 6
    var other: AnyObject?  // box word 7
  }

  final class Opaque {
    var value: Any = 0  // an existential: any of its words may hold a reference
    var choice: Choice = .none
  }

  enum Choice {
    case none
    case some(AnyObject, Int8)
  }

  /// ArgumentParser's shape: an option's value is an enum of the parsed value and a closure.
  enum Parsed<Value> {
    case value(Value)
    case definition(() -> Void)
  }

  struct Options {
    var count: Int? = 7  // 9 bytes: no reference
    var name: String? = nil  // a String: its second word only
  }

  indirect enum Tree {
    case leaf(Int)
    case node(Tree, Tree)
  }

  final class WithEnums {
    var parsed: Parsed<Options> = .value(Options())  // words 2-6: 33 bytes, the tag last
    var tail: Parsed<Int?> = .value(3)  // words 7-9
    var tree: Tree = .leaf(1)  // word 10: every case is indirect, a box
  }

  /// A word may hold a reference when it may in some case's payload (generic ones read
  /// with the enum's own arguments) or holds an indirect case's box; the tag word never.
  @Test func enumWordsThatCannotHoldAReference() throws {
    #expect(MemoryLayout<Parsed<Options>>.size == 33)
    let object = WithEnums()
    let metadata = UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque()).load(as: UInt.self)
    var reader = ReferenceLayoutReader()
    let found = reader.excludedWords(ofClassMetadata: metadata)
    let layout = try #require(found)
    #expect(layout.words == 11)
    // 4: the String's count and flags; 6 and 9: tags.
    #expect(layout.excluded == [4, 6, 9])
    withExtendedLifetime(object) {}
  }

  @Test func classWordsThatCannotHoldAReference() throws {
    let object = Padded()
    let metadata = UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque()).load(as: UInt.self)
    var reader = ReferenceLayoutReader()
    let found = reader.excludedWords(ofClassMetadata: metadata)
    let layout = try #require(found)
    #expect(layout.words == 11)
    #expect(layout.excluded == [2, 4, 5, 6, 9])
    withExtendedLifetime(object) {}
  }

  /// Wrapped: an existential passed to a generic parameter is opened (SE-0352).
  struct Container { var value: Any }

  /// In a generic context the runtime allocates the box (`swift_allocBox`), with generic
  /// box metadata; a box the compiler lays out for a known type reads as a closure context.
  @inline(never) static func existential<T>(_ value: T) -> Any { value }

  /// A value too big for an existential's inline buffer lives in a generic box.
  @Test func boxedStructWordsThatCannotHoldAReference() throws {
    let value = Container(value: Self.existential(Boxed()))
    let box = withUnsafeBytes(of: value) { $0.load(as: UInt.self) }
    let metadata = UnsafeRawPointer(bitPattern: box)!.load(as: UInt.self)
    var namer = SwiftMetadataNamer()
    #expect(namer.category(forMetadata: metadata).name == AllocationCategory.genericBoxName)
    let boxed = try #require(namer.boxedStruct(ofBoxMetadata: metadata) as UInt?)
    var reader = ReferenceLayoutReader()
    let found = reader.excludedWords(ofBoxMetadata: metadata, boxedType: boxed)
    let layout = try #require(found)
    #expect(layout.words == 8)
    #expect(layout.excluded == [2, 3, 5, 6])
    withExtendedLifetime(value) {}
  }

  /// An existential may hold a reference in any word it covers.
  @Test func existentialsAndEnumsAreWhollyPossibleReferences() throws {
    let object = Opaque()
    let metadata = UnsafeRawPointer(Unmanaged.passUnretained(object).toOpaque()).load(as: UInt.self)
    var reader = ReferenceLayoutReader()
    let found = reader.excludedWords(ofClassMetadata: metadata)
    let layout = try #require(found)
    // value: words 2-5 (32 bytes); choice: words 6 and 7 (9 bytes: its only payload
    // case's second word holds the Int8, the tag is in spare bits).
    #expect(MemoryLayout<Any>.size == 32)
    #expect(layout.excluded == [7])
    withExtendedLifetime(object) {}
  }
}
