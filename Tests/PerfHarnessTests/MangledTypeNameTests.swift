import Testing

@testable import PerfHarness

/// Which mangled type names the runtime may be asked to resolve without a generic context:
/// a wrong "no" aborts the recorded program, a wrong "yes" only costs a capture's name.
struct MangledTypeNameTests {
  private static func scan(_ bytes: [UInt8]) -> (length: Int, generic: Bool)? {
    let stored = bytes + [0]
    return stored.withUnsafeBufferPointer { buffer in
      MangledTypeName(buffer.baseAddress!).map { ($0.length, $0.mayNeedGenericContext) }
    }
  }

  private static func scan(_ text: String) -> (length: Int, generic: Bool)? { scan(Array(text.utf8)) }

  @Test(
    "Names that mention a generic parameter, an associated type or an opaque type need their context",
    arguments: [
      "x",  // the first generic parameter
      "SS_xtYaKc",  // (String, T) async throws -> ()
      "4main6RouterCyxG",  // Router<T>
      "SS_4main7RequestV7ContextQztYaKcqd__",  // (Request, Self.Context) async throws -> Output
      "q_",  // a parameter by index
      "0a5Query07ContextQz",  // a word-substituted identifier, then an associated type
      "4main4ViewQr",  // an opaque result type
    ])
  func generic(_ name: String) {
    #expect(Self.scan(name)?.generic == true)
  }

  @Test(
    "Concrete names are resolved: an x, q or Q inside an identifier or a standard type is no parameter",
    arguments: [
      "Si",  // Int
      "SiSg",  // Int?
      "Sq",  // Optional's standard substitution
      "4main9XylophoneC",  // letters of an identifier
      "4main5QueueC0a5Query0C",  // an identifier with a word substitution
      "4main5QueueCXw",  // weak
      "SS_SitYaKc",  // (String, Int) async throws -> ()
      "SSIegx_",  // a function's conventions (x: owned)
      "4main5QueueCAaxB",  // substitutions of earlier nodes (lower-case letters, an upper-case last)
    ])
  func concrete(_ name: String) {
    #expect(Self.scan(name)?.generic == false)
  }

  @Test("A symbolic reference's four bytes may be anything, a zero or an x among them")
  func symbolicReferences() {
    // A direct reference to a context (0x01), its offset 0x00_51_71_78 (bytes x, q, Q, 0),
    // then C: a class.
    let scanned = Self.scan([0x01, 0x78, 0x71, 0x51, 0x00, UInt8(ascii: "C")])
    #expect(scanned?.length == 6)
    #expect(scanned?.generic == false)
    // The same with an eight-byte absolute reference (0x18), then a generic parameter.
    let indirect = Self.scan([0x18, 0, 0x78, 0, 0, 0, 0, 0, 0, UInt8(ascii: "x")])
    #expect(indirect?.length == 10)
    #expect(indirect?.generic == true)
  }

  @Test("A name with no end within 4 KiB is not read")
  func unterminated() {
    let bytes = [UInt8](repeating: UInt8(ascii: "S"), count: 5000)
    #expect(bytes.withUnsafeBufferPointer { MangledTypeName($0.baseAddress!) } == nil)
  }
}
