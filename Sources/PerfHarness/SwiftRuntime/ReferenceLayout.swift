import CPerfHeapScan
@_spi(Reflection) import Swift

/// Which words of a Swift object cannot hold a reference, from its type's metadata: a
/// reference is 8 aligned bytes inside one stored value, so a word that reaches into
/// padding (after a short property, or the seven bytes after a multi-payload enum's tag
/// byte) or lies in a number-typed property is never one. Such words are what a value
/// copied in from the stack leaves behind: in the debug build of the leaks corpus, the
/// padding after an `Int?` option of the child's parsed command line (a box older than
/// the recording) named a leaked array buffer and hid a cycle in most runs.
///
/// Conservative: a type whose stored properties cannot all be read (no reflection
/// metadata, a word-sized hole the fields do not explain) gets no layout, and enums,
/// existentials, closures and anything else that may hold a reference anywhere in its
/// bytes count as wholly possible references.
struct ReferenceLayoutReader {
  /// Per type: byte ranges (relative to its start) that may hold a reference; nil when
  /// the whole value may.
  private var cache: [UInt: [Range<Int>]?] = [:]

  /// The words (from the object's start) that cannot hold a reference, and how many words
  /// the layout covers; nil when it is not known. `metadata` must be validated class
  /// metadata (see `SwiftMetadataNamer`).
  mutating func excludedWords(ofClassMetadata metadata: UInt) -> (words: Int, excluded: [Int])? {
    let raw = UnsafeRawPointer(bitPattern: metadata)!
    let instanceSize = Int(raw.load(fromByteOffset: 24, as: UInt32.self))
    let type = unsafeBitCast(raw, to: Any.Type.self)
    var fields: [(offset: Int, type: Any.Type)] = []
    // A class: its superclasses' fields come first.
    let classType = _EachFieldOptions(rawValue: 1)  // .classType, a static var: not Sendable
    let complete = _forEachField(of: type, options: classType) { _, offset, fieldType, _ in
      fields.append((offset, fieldType))
      return true
    }
    guard complete, !fields.isEmpty else { return nil }
    guard let possible = possibleReferences(fields: fields, from: 16, size: instanceSize) else { return nil }
    return Self.excluded(possible: possible, firstWord: 2, end: instanceSize)
  }

  /// For a generic box (heap metadata kind 0x500: `Offset` at +8, `BoxedType` at +16) of a
  /// struct. `boxedType` must be validated struct metadata.
  mutating func excludedWords(ofBoxMetadata metadata: UInt, boxedType: UInt) -> (words: Int, excluded: [Int])? {
    let valueOffset = Int(UnsafeRawPointer(bitPattern: metadata)!.load(fromByteOffset: 8, as: UInt32.self))
    let type = unsafeBitCast(UnsafeRawPointer(bitPattern: boxedType)!, to: Any.Type.self)
    guard valueOffset >= 16, valueOffset < 4096 else { return nil }
    let size = Self.size(type)
    guard let inner = possibleReferences(type) else { return nil }
    let possible = inner.map { ($0.lowerBound + valueOffset)..<($0.upperBound + valueOffset) }
    return Self.excluded(possible: possible, firstWord: 2, end: valueOffset + size)
  }

  private static func excluded(possible: [Range<Int>], firstWord: Int, end: Int) -> (words: Int, excluded: [Int]) {
    let words = (end + 7) / 8
    var excluded: [Int] = []
    var index = 0
    for word in firstWord..<max(firstWord, words) {
      let bytes = (word * 8)..<(word * 8 + 8)
      while index < possible.count, possible[index].upperBound <= bytes.lowerBound { index += 1 }
      let inside =
        index < possible.count && possible[index].lowerBound <= bytes.lowerBound
        && bytes.upperBound <= possible[index].upperBound
      if !inside { excluded.append(word) }
    }
    return (words, excluded)
  }

  /// Called with an `Any.Type`, which opens it (SE-0352).
  private static func size<T>(_: T.Type) -> Int { MemoryLayout<T>.size }

  /// Builtin and standard number types: never a reference.
  private static func isNumber(_ type: Any.Type) -> Bool {
    let name = _typeName(type, qualified: false)
    return LeakAnalysis.numberTypeNames.contains(name) || name.hasPrefix("Builtin.Int")
      || name.hasPrefix("Builtin.FPIEEE")
  }

  /// Sorted, disjoint byte ranges of a value of `type` that may hold a reference; nil:
  /// all of it may.
  private mutating func possibleReferences(_ type: Any.Type) -> [Range<Int>]? {
    let key = UInt(bitPattern: unsafeBitCast(type, to: UnsafeRawPointer.self))
    if let known = cache[key] { return known }
    cache[key] = .some(nil)  // a recursive type reads as opaque while it is being read
    let size = Self.size(type)
    var result: [Range<Int>]?
    if Self.isNumber(type) {
      result = []
    } else {
      let kind = UnsafeRawPointer(bitPattern: key)!.load(as: UInt.self)
      // Structs and tuples: their stored values; enums: their payloads' words; anything
      // else may hold one anywhere.
      if kind == 0x201 || kind == 0x202 {
        result = enumPossibleReferences(metadata: key)
      } else if kind == 0x200 || kind == 0x301 {
        var fields: [(offset: Int, type: Any.Type)] = []
        let complete = _forEachField(of: type, options: []) { _, offset, fieldType, _ in
          fields.append((offset, fieldType))
          return true
        }
        if complete, !fields.isEmpty || size == 0 {
          result = possibleReferences(fields: fields, from: 0, size: size)
        }
      }
    }
    cache[key] = .some(result)
    return result
  }

  /// An enum's payloads all start at its first byte; its tag (when it has one of its own)
  /// follows the largest. A word may hold a reference when it may in some case's payload,
  /// or when it holds an indirect case's box. nil when a payload's type cannot be read.
  private mutating func enumPossibleReferences(metadata: UInt) -> [Range<Int>]? {
    let raw = UnsafeRawPointer(bitPattern: metadata)!
    let description = raw.load(fromByteOffset: 8, as: UInt.self)
    guard description != 0, description & 3 == 0 else { return nil }
    let descriptor = UnsafeRawPointer(bitPattern: description)!
    guard descriptor.load(as: UInt32.self) & 0x1F == 18 else { return nil }  // ContextDescriptorKind.enum
    let payloadCases = Int(descriptor.load(fromByteOffset: 20, as: UInt32.self) & 0x00FF_FFFF)
    if payloadCases == 0 { return [] }
    guard let fieldDescriptor = FieldLayoutReader.relative(description + 16) else { return nil }
    let fields = UnsafeRawPointer(bitPattern: fieldDescriptor)!
    let recordSize = Int(fields.load(fromByteOffset: 10, as: UInt16.self))
    let count = Int(fields.load(fromByteOffset: 12, as: UInt32.self))
    guard recordSize >= 12, payloadCases <= count, count < 100_000 else { return nil }
    var wordStarts = Set<Int>()
    for index in 0..<payloadCases {
      let record = fieldDescriptor + 16 + UInt(index * recordSize)
      let flags = UnsafeRawPointer(bitPattern: record)!.load(as: UInt32.self)
      if flags & 1 != 0 {  // an indirect case: a box
        wordStarts.insert(0)
        continue
      }
      guard let name = FieldLayoutReader.relative(record + 4), let length = FieldLayoutReader.mangledNameLength(name),
        let payload = _getTypeByMangledNameInContext(
          UnsafePointer(bitPattern: name)!, UInt(length), genericContext: descriptor,
          genericArguments: raw + 16)  // a value type's generic arguments follow its descriptor
      else { return nil }
      let ranges = possibleReferences(payload) ?? [0..<Self.size(payload)]
      for range in ranges {
        var start = (range.lowerBound + 7) / 8 * 8
        while start + 8 <= range.upperBound {
          wordStarts.insert(start)
          start += 8
        }
      }
    }
    return wordStarts.sorted().map { $0..<($0 + 8) }
  }

  /// The ranges of `fields` (in [from, size)) that may hold a reference; nil when the
  /// fields leave a whole aligned word unexplained (a field the metadata did not list).
  private mutating func possibleReferences(fields: [(offset: Int, type: Any.Type)], from: Int, size: Int)
    -> [Range<Int>]?
  {
    var ranges: [Range<Int>] = []
    var covered = from
    for field in fields.sorted(by: { $0.offset < $1.offset }) {
      let fieldSize = Self.size(field.type)
      guard field.offset >= covered else { return nil }  // overlapping: not a layout we understand
      if Self.holeHasWord(covered, field.offset) { return nil }
      let base = field.offset
      if let inner = possibleReferences(field.type) {
        ranges += inner.map { ($0.lowerBound + base)..<($0.upperBound + base) }
      } else {
        ranges.append(base..<(base + fieldSize))
      }
      covered = base + fieldSize
    }
    if Self.holeHasWord(covered, size) { return nil }
    return ranges
  }

  /// Whether [start, end) contains a whole aligned word (more than alignment padding).
  private static func holeHasWord(_ start: Int, _ end: Int) -> Bool {
    (start + 7) / 8 * 8 + 8 <= end
  }
}

/// The layouts of a recording's Swift types, in the form the C scan reads
/// (`CPerfHeapScan_Layout`, sorted by metadata, with one bit per word).
struct ReferenceLayouts {
  var entries: [CPerfHeapScan_Layout] = []
  var bits: [UInt64] = []

  static func read(categories: [AllocationCategoryKey: AllocationCategory]) -> ReferenceLayouts {
    var reader = ReferenceLayoutReader()
    var namer: SwiftMetadataNamer?
    var found: [(metadata: UInt, words: Int, excluded: [Int])] = []
    for (key, category) in categories {
      guard case .swiftObject(let metadata) = key else { continue }
      var layout: (words: Int, excluded: [Int])?
      switch category.kind {
      case .swiftClass:
        layout = reader.excludedWords(ofClassMetadata: metadata)
      case .swiftBox where category.name == AllocationCategory.genericBoxName:
        if namer == nil { namer = SwiftMetadataNamer() }
        if let boxed = namer!.boxedStruct(ofBoxMetadata: metadata) {
          layout = reader.excludedWords(ofBoxMetadata: metadata, boxedType: boxed)
        }
      default:
        break
      }
      if let layout, !layout.excluded.isEmpty, layout.words < 1 << 20 {
        found.append((metadata, layout.words, layout.excluded))
      }
    }
    var result = ReferenceLayouts()
    var bitCount = 0
    for layout in found.sorted(by: { $0.metadata < $1.metadata }) {
      result.entries.append(
        CPerfHeapScan_Layout(metadata: UInt64(layout.metadata), firstBit: UInt32(bitCount), words: UInt32(layout.words))
      )
      result.bits += [UInt64](repeating: 0, count: (bitCount + layout.words + 63) / 64 - result.bits.count)
      for word in layout.excluded {
        let bit = bitCount + word
        result.bits[bit / 64] |= 1 << UInt64(bit % 64)
      }
      bitCount += layout.words
    }
    return result
  }
}
