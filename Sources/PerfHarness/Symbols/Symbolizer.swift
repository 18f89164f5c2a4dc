import CPerfSymbols
import Synchronization

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// One function frame for an address: the real function, or one that the compiler inlined
/// into it. `Symbolizer.frames(at:isReturnAddress:)` returns these innermost first.
struct SymbolizedFrame: Sendable, Hashable {
  /// Demangled name; "0x<hex>" of the address when nothing names it.
  var symbol: String
  /// Raw symbol (or DWARF linkage) name when there is one.
  var mangledName: String?
  /// Swift module parsed from the mangled name (see `swiftModuleName(fromMangled:)`);
  /// nil for non-Swift symbols.
  var swiftModule: String?
  /// Image basename: "perfharness", "libswiftCore.so", "libc.so.6"; "???" when unknown.
  var image: String
  /// Image path as mapped; "" when the address is in no image.
  var imagePath: String
  /// The image is the process's main executable (/proc/self/exe).
  var isMainExecutable: Bool
  /// The image has debug info (somewhere, not necessarily for this address).
  var imageHasDebugInfo = false
  /// Source file path when debug info has it.
  var file: String?
  var line: Int?
  /// True for a frame that was inlined into the next one in the returned chain.
  var isInlined: Bool

  /// The module a report shows: the Swift module; for the harness's own C targets, linked
  /// into the profiled executable, the target (`CPerfAlloc`) rather than the executable's
  /// name, so the malloc hooks do not read as the program's code; otherwise the image.
  var reportedModule: String {
    swiftModule ?? harnessCTarget ?? image
  }

  /// The harness's C target this frame's source belongs to, e.g. `CPerfAlloc`. Debug info
  /// names a package's own sources relative to the package (`Sources/CPerfAlloc/hooks.c`)
  /// and a dependency's by their full path.
  var harnessCTarget: String? {
    guard let file, let range = file.range(of: "Sources/CPerf"),
      range.lowerBound == file.startIndex || file[file.index(before: range.lowerBound)] == "/"
    else { return nil }
    return String(file[range.lowerBound...].dropFirst("Sources/".count).prefix { $0 != "/" })
  }
}

/// Why a `Symbolizer` could not be created or refreshed.
struct SymbolizerError: Error, CustomStringConvertible {
  var description: String
}

/// Turns code addresses of the current process into function names, images, source
/// locations and inlined-call chains, using elfutils libdwfl on the process's own mappings.
///
/// It reads `.symtab` (so it names non-exported functions, which `dladdr` cannot: SwiftPM
/// does not link with `--export-dynamic`) and DWARF line and inline information.
///
/// Use it after recording, never in a signal handler or allocation hook: it allocates,
/// takes locks and reads files. Not thread-safe: confine an instance to one thread (or
/// guard it with a lock). Results are cached per address, so symbolizing a profile costs
/// one lookup per unique address.
final class Symbolizer {
  private var session: OpaquePointer
  private let mainExecutablePath: String?
  private var cache: [CacheKey: [SymbolizedFrame]] = [:]

  private struct CacheKey: Hashable {
    var address: UInt
    var isReturnAddress: Bool
  }

  /// Takes a snapshot of the images loaded in the current process. Call `refresh()` after
  /// a `dlopen` to see images loaded later.
  init() throws {
    guard let session = Symbolizer.libdw.withLock({ _ in CPerfSymbols_open() }) else {
      throw SymbolizerError(
        description: "cannot read this process's mappings with libdwfl: "
          + String(cString: CPerfSymbols_lastError()))
    }
    self.session = session
    self.mainExecutablePath = Self.readMainExecutablePath()
  }

  deinit {
    Symbolizer.libdw.withLock { _ in CPerfSymbols_close(session) }
  }

  /// elfutils 0.188 documents no thread safety (libelf and libdw share caches), so every
  /// call into it goes through this one lock.
  private static let libdw = Mutex(())

  /// Re-reads the process's mappings (after `dlopen`/`dlclose`) and drops cached results.
  func refresh() throws {
    cache.removeAll(keepingCapacity: true)
    guard Symbolizer.libdw.withLock({ _ in CPerfSymbols_refresh(session) }) == 0 else {
      throw SymbolizerError(
        description: "cannot re-read this process's mappings with libdwfl: "
          + String(cString: CPerfSymbols_lastError()))
    }
  }

  /// The global variable (or any symbol) covering a data address, demangled: what a heap
  /// scan's global root is called. `image+0x…` where the image has no symbol there, nil
  /// outside every image.
  func globalName(at address: UInt) -> String? {
    Symbolizer.libdw.withLock { _ -> String? in
      var path: UnsafePointer<CChar>?
      let name = CPerfSymbols_dataSymbol(session, UInt64(address), &path).map { String(cString: $0) }
      guard let path else { return nil }
      if let name { return demangleSymbolName(name).map(SymbolName.simplified) ?? name }
      return (String(cString: path).split(separator: "/").last.map(String.init) ?? "?") + " (no symbol)"
    }
  }

  /// The frames for one code address, innermost first. Every element but the last is a
  /// function inlined into the element after it; the last one is the real function whose
  /// code holds the address. Never empty.
  ///
  /// - Parameter isReturnAddress: the address was read from a stack (it points after a
  ///   call), so the call instruction is looked up (address - 1). Pass false for the
  ///   interrupted PC of a sample's leaf frame and for function addresses.
  func frames(at address: UInt, isReturnAddress: Bool) -> [SymbolizedFrame] {
    let key = CacheKey(address: address, isReturnAddress: isReturnAddress)
    if let cached = cache[key] { return cached }
    let result = Symbolizer.libdw.withLock { _ in lookUp(address, isReturnAddress: isReturnAddress) }
    cache[key] = result
    return result
  }

  private func lookUp(_ address: UInt, isReturnAddress: Bool) -> [SymbolizedFrame] {
    let unknownName = "0x" + String(address, radix: 16)
    let pc = isReturnAddress && address > 0 ? address - 1 : address
    var location = CPerfSymbols_Location()
    guard CPerfSymbols_lookup(session, UInt64(pc), &location) == 0 else {
      return [
        SymbolizedFrame(
          symbol: unknownName, mangledName: nil, swiftModule: nil, image: "???",
          imagePath: "", isMainExecutable: false, file: nil, line: nil, isInlined: false)
      ]
    }

    let imagePath = location.modulePath.map { String(cString: $0) } ?? ""
    let image = imagePath.split(separator: "/").last.map(String.init) ?? imagePath
    let isMainExecutable = mainExecutablePath != nil && imagePath == mainExecutablePath
    let imageHasDebugInfo = location.moduleHasDebugInfo != 0

    func makeFrame(
      mangled: String?, plainName: String?, file: String?, line: Int32, isInlined: Bool
    ) -> SymbolizedFrame {
      SymbolizedFrame(
        symbol: mangled.flatMap(demangledWithPltSuffix) ?? mangled ?? plainName ?? unknownName,
        mangledName: mangled,
        swiftModule: mangled.flatMap(swiftModuleName(fromMangled:)),
        image: image, imagePath: imagePath, isMainExecutable: isMainExecutable,
        imageHasDebugInfo: imageHasDebugInfo, file: file, line: line > 0 ? Int(line) : nil, isInlined: isInlined)
    }

    var frames: [SymbolizedFrame] = []
    // The line table gives the innermost location; each inlined scope's call site is the
    // location in the next frame out.
    var file = location.sourceFile.map { String(cString: $0) }
    var line = location.line
    if location.hasDebugInfo != 0 {
      for inlined in inlineFrames(at: pc) {
        let linkageName = inlined.linkageName.map { String(cString: $0) }
        let name = inlined.name.map { String(cString: $0) }
        frames.append(
          makeFrame(mangled: linkageName, plainName: name, file: file, line: line, isInlined: true))
        file = inlined.callFile.map { String(cString: $0) }
        line = inlined.callLine
      }
    }
    frames.append(
      makeFrame(
        mangled: location.symbolName.map { String(cString: $0) }, plainName: nil,
        file: file, line: line, isInlined: false))
    return frames
  }

  private func inlineFrames(at pc: UInt) -> [CPerfSymbols_InlineFrame] {
    var buffer = [CPerfSymbols_InlineFrame](repeating: CPerfSymbols_InlineFrame(), count: 8)
    var count = Int(CPerfSymbols_inlineFrames(session, UInt64(pc), &buffer, Int32(buffer.count)))
    if count > buffer.count {
      buffer = [CPerfSymbols_InlineFrame](repeating: CPerfSymbols_InlineFrame(), count: count)
      count = Int(CPerfSymbols_inlineFrames(session, UInt64(pc), &buffer, Int32(buffer.count)))
    }
    return Array(buffer.prefix(max(0, min(count, buffer.count))))
  }

  private static func readMainExecutablePath() -> String? {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard length > 0 else { return nil }
    return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }
}

/// The demangled form of a Swift symbol (via libswiftCore's `swift_demangle`), or nil when
/// `mangled` is not a Swift symbol.
func demangleSwiftSymbol(_ mangled: String) -> String? {
  var mangled = mangled
  return mangled.withUTF8 { bytes -> String? in
    guard let base = bytes.baseAddress, !bytes.isEmpty else { return nil }
    return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) { name in
      guard let demangled = CPerfSymbols_swiftDemangle(name, bytes.count) else { return nil }
      defer { free(demangled) }
      return String(cString: demangled)
    }
  }
}

/// Swift demangling first, then Itanium C++ (Foundation, ICU and libstdc++ frames).
/// A PLT stub's name (`$sSS5countSivg@plt`, as CPerfSymbols names them) demangled with
/// its suffix kept.
func demangledWithPltSuffix(_ mangled: String) -> String? {
  guard mangled.hasSuffix("@plt") else { return demangleSymbolName(mangled) }
  return demangleSymbolName(String(mangled.dropLast(4))).map { $0 + "@plt" }
}

func demangleSymbolName(_ mangled: String) -> String? {
  if let swift = demangleSwiftSymbol(mangled) { return swift }
  guard mangled.hasPrefix("_Z"), let demangled = CPerfSymbols_cxxDemangle(mangled) else {
    return nil
  }
  defer { free(demangled) }
  return String(cString: demangled)
}

/// The Swift module a mangled symbol belongs to, read from the start of its mangling:
/// "$s5MyApp…" → "MyApp", a standard-library substitution ("$sSi…", "$ss…")
/// → "Swift", an imported C/Objective-C context ("$sSo…", "$sSC…") → "__C". nil for
/// non-Swift names and for manglings that do not start with a plain module identifier.
///
/// This names the module of the outermost context: an extension that an app declares on a
/// standard-library type ("$sSa5MyAppE…") reports "Swift". Use the image to decide
/// what is the user's code.
func swiftModuleName(fromMangled mangled: String) -> String? {
  var rest = Substring(mangled)
  if rest.hasPrefix("_$") { rest = rest.dropFirst() }
  if rest.hasPrefix("$s") || rest.hasPrefix("$S") {
    rest = rest.dropFirst(2)
  } else if rest.hasPrefix("_T0") {
    rest = rest.dropFirst(3)
  } else {
    return nil
  }
  let bytes = Array(rest.utf8)
  guard let first = bytes.first else { return nil }
  switch first {
  case UInt8(ascii: "1")...UInt8(ascii: "9"):
    var length = 0
    var index = 0
    while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
      length = length * 10 + Int(bytes[index] - UInt8(ascii: "0"))
      index += 1
      if length > bytes.count { return nil }
    }
    guard length > 0, index + length <= bytes.count else { return nil }
    return String(decoding: bytes[index..<(index + length)], as: UTF8.self)
  case UInt8(ascii: "S"):
    if bytes.count > 1, bytes[1] == UInt8(ascii: "o") || bytes[1] == UInt8(ascii: "C") {
      return "__C"
    }
    return "Swift"
  case UInt8(ascii: "s"):
    return "Swift"
  default:
    // "0…" starts a word-substituted or punycoded identifier; anything else is a
    // context this parser does not model.
    return nil
  }
}
