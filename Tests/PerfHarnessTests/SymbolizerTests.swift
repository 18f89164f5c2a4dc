import CPerfSymbols
import Testing
import UnwindCases

@testable import PerfHarness

#if canImport(Glibc)
  import Glibc
#endif

// glibc's backtrace(3), looked up at run time: execinfo.h is not in the Glibc module map.
private typealias BacktraceFunction =
  @convention(c) (UnsafeMutablePointer<UnsafeMutableRawPointer?>?, Int32) -> Int32
private let glibcBacktrace = unsafeBitCast(dlsym(nil, "backtrace"), to: BacktraceFunction.self)

/// Return addresses of its own stack, entry 0 being the call to backtrace on `line`.
@inline(never)
func symbolizerProbeFunction() -> (addresses: [UInt], line: Int) {
  var buffer = [UnsafeMutableRawPointer?](repeating: nil, count: 64)
  let line = #line
  let count = glibcBacktrace(&buffer, Int32(buffer.count))
  return (buffer.prefix(Int(count)).map { UInt(bitPattern: $0) }, line)
}

// swiftc inlines this only with optimization (release builds); debug builds keep the call.
@inline(__always)
func symbolizerInlinedCapture() -> (addresses: [UInt], line: Int) {
  var buffer = [UnsafeMutableRawPointer?](repeating: nil, count: 64)
  let line = #line
  let count = glibcBacktrace(&buffer, Int32(buffer.count))
  return (buffer.prefix(Int(count)).map { UInt(bitPattern: $0) }, line)
}

@inline(never)
func symbolizerInliningCaller() -> (addresses: [UInt], line: Int, callLine: Int) {
  let callLine = #line
  let capture = symbolizerInlinedCapture()
  return (capture.addresses, capture.line, callLine)
}

@Suite("Symbolizer")
struct SymbolizerTests {
  /// The harness's C hooks are linked into the profiled executable: they are not the
  /// program's code whether debug info names their source relative to this package (its own
  /// build) or by a full path (a user's package depending on it).
  @Test(
    arguments: [
      ("Sources/CPerfAlloc/hooks.c", "CPerfAlloc", false),
      ("/home/me/app/.build/checkouts/perfharness/Sources/CPerfSampler/handler.c", "CPerfSampler", false),
      ("Sources/CLibOfTheApp/lib.c", "app", true),
    ])
  func harnessCFramesAreNotAppCode(file: String, module: String, isApp: Bool) {
    let frame = SymbolizedFrame(
      symbol: "recordAlloc", mangledName: "recordAlloc", swiftModule: nil, image: "app", imagePath: "/bin/app",
      isMainExecutable: true, file: file, line: 1, isInlined: false)
    #expect(frame.reportedModule == module)
    #expect(CodeOwnership.isAppCode(frame) == isApp)
  }

  /// In an executable without debug info (C built with `-O2` and no `-g`), the program's
  /// functions are app code; what the start files, the linker and a static runtime add is not.
  @Test(
    arguments: [
      ("parse_header", false, true), ("parse_header", true, false), ("_start", false, false),
      ("frame_dummy", false, false), ("memcpy@plt", false, false), ("swift_retain", false, false),
      ("0x4011a0", false, false),
    ])
  func codeWithoutDebugInfo(symbol: String, imageHasDebugInfo: Bool, isApp: Bool) {
    let frame = SymbolizedFrame(
      symbol: symbol, mangledName: symbol, swiftModule: nil, image: "app", imagePath: "/bin/app",
      isMainExecutable: true, imageHasDebugInfo: imageHasDebugInfo, file: nil, line: nil, isInlined: false)
    #expect(CodeOwnership.isAppCode(frame) == isApp)
  }

  /// Thunks the compiler makes (partial apply forwarders) are named "<compiler-generated>",
  /// with or without a directory before it: neither is the program's own code, so a leak's
  /// site names the function that allocated, not the thunk that called it.
  @Test(arguments: ["<compiler-generated>", "//<compiler-generated>", "/src/App/main.swift"])
  func compilerGeneratedFramesAreNotAppCode(file: String) {
    let frame = SymbolizedFrame(
      symbol: "closure #1 in App.run()", mangledName: "$s3App3runyyFyycfU_", swiftModule: "App", image: "app",
      imagePath: "/bin/app", isMainExecutable: true, file: file, line: 1, isInlined: false)
    #expect(CodeOwnership.isAppCode(frame) == !file.hasSuffix("<compiler-generated>"))
  }

  @Test func namesANonExportedSwiftFunctionOfTheExecutable() throws {
    let symbolizer = try Symbolizer()
    let probe = symbolizerProbeFunction()
    let address = try #require(probe.addresses.first)
    let frames = symbolizer.frames(at: address, isReturnAddress: true)
    let frame = try #require(frames.last)
    #expect(!frame.isInlined)
    #expect(frame.symbol.contains("symbolizerProbeFunction"))
    #expect(frame.mangledName?.hasPrefix("$s") == true)
    #expect(frame.swiftModule == "PerfHarnessTests")
    #expect(frame.isMainExecutable)
    #expect(frame.imagePath.hasSuffix("/" + frame.image))
    #expect(frame.file?.hasSuffix("SymbolizerTests.swift") == true)
    let line = try #require(frame.line)
    #expect(abs(line - probe.line) <= 2)

    // Its caller is this test, also in the executable.
    let caller = try #require(symbolizer.frames(at: probe.addresses[1], isReturnAddress: true).last)
    #expect(caller.symbol.contains("namesANonExportedSwiftFunctionOfTheExecutable"))
  }

  /// PLT stubs have no symbol of their own: the one before them (_init) or none named them.
  @Test func namesAPltStubAfterItsTarget() throws {
    let symbolizer = try Symbolizer()
    // The fixture's first direct call (e8) or jump (e9) with a 32-bit displacement.
    let code = try #require(UnwindCases_callThroughPltCode())
    let offset = try #require((0..<64).first { code[$0] == 0xe8 || code[$0] == 0xe9 })
    let displacement = UnsafeRawPointer(code + offset + 1).loadUnaligned(as: Int32.self)
    #expect(UnwindCases_callThroughPlt() > 1)
    let stub = UInt(bitPattern: code + offset + 5) &+ UInt(bitPattern: Int(displacement))
    let frame = try #require(symbolizer.frames(at: stub + 4, isReturnAddress: false).last)
    #expect(frame.symbol == "getppid@plt", "\(frame.symbol) in \(frame.image)")
  }

  @Test func namesALibcFunction() throws {
    let symbolizer = try Symbolizer()
    let address = UInt(bitPattern: try #require(dlsym(nil, "getpid")))
    let frames = symbolizer.frames(at: address, isReturnAddress: false)
    #expect(frames.count == 1)
    let frame = try #require(frames.last)
    #expect(frame.image.contains("libc"))
    #expect(!frame.isMainExecutable)
    #expect(frame.swiftModule == nil)
    #expect(["getpid", "__getpid"].contains(frame.symbol))
  }

  @Test func namesAnExportedRuntimeFunction() throws {
    let symbolizer = try Symbolizer()
    let address = UInt(bitPattern: try #require(dlsym(nil, "swift_retain")))
    let frame = try #require(symbolizer.frames(at: address, isReturnAddress: false).last)
    #expect(frame.image == "libswiftCore.so")
    #expect(frame.symbol == "swift_retain")
  }

  @Test func unknownAddressGivesOneHexFrame() throws {
    let symbolizer = try Symbolizer()
    for isReturnAddress in [false, true] {
      let frames = symbolizer.frames(at: 0x10, isReturnAddress: isReturnAddress)
      #expect(frames.count == 1)
      #expect(frames.first?.symbol == "0x10")
      #expect(frames.first?.mangledName == nil)
      #expect(frames.first?.isMainExecutable == false)
    }
    #expect(symbolizer.frames(at: 0, isReturnAddress: true).first?.symbol == "0x0")
  }

  @Test func resultsAreCachedAndSurviveRefresh() throws {
    let symbolizer = try Symbolizer()
    let address = try #require(symbolizerProbeFunction().addresses.first)
    let first = symbolizer.frames(at: address, isReturnAddress: true)
    #expect(symbolizer.frames(at: address, isReturnAddress: true) == first)
    try symbolizer.refresh()
    #expect(symbolizer.frames(at: address, isReturnAddress: true) == first)
  }

  @Test func demanglesSwiftSymbols() {
    #expect(demangleSwiftSymbol("$sSi1poiyS2i_SitFZ")?.contains("static Swift.Int.+ infix") == true)
    #expect(demangleSwiftSymbol("printf") == nil)
    #expect(demangleSwiftSymbol("") == nil)
    #expect(demangleSwiftSymbol("_ZN5swift34runJobInEstablishedExecutorContextEPNS_3JobE") == nil)
    #expect(
      demangleSymbolName("_ZN5swift34runJobInEstablishedExecutorContextEPNS_3JobE")
        == "swift::runJobInEstablishedExecutorContext(swift::Job*)")
  }

  @Test(arguments: [
    ("$s16PerfHarnessTests23symbolizerProbeFunctionSaySuG9addresses_Si4linetyF", "PerfHarnessTests"),
    ("_$s11PhotoSearch5PhotoV4nameSSvg", "PhotoSearch"),
    ("$S11PhotoSearch5PhotoV4nameSSvg", "PhotoSearch"),
    ("_T011PhotoSearch5PhotoV4nameSSvg", "PhotoSearch"),
    ("$sSi1poiyS2i_SitFZ", "Swift"),
    ("$ss5print_9separator10terminatoryypd_S2StF", "Swift"),
    ("$sSo8NSObjectCML", "__C"),
    ("$sSC7CGFloatVMn", "__C"),
  ])
  func parsesSwiftModule(mangled: String, module: String) {
    #expect(swiftModuleName(fromMangled: mangled) == module)
  }

  @Test func nonSwiftNamesHaveNoSwiftModule() {
    for name in ["printf", "_ZN5swift3JobE", "$", "$s", "$s0", "$s99Short", "main"] {
      #expect(swiftModuleName(fromMangled: name) == nil, "\(name)")
    }
  }

  @Test func swiftModuleOfRealSymbols() throws {
    let symbolizer = try Symbolizer()
    let retain = UInt(bitPattern: try #require(dlsym(nil, "swift_retain")))
    #expect(symbolizer.frames(at: retain, isReturnAddress: false).last?.swiftModule == nil)
    // A stdlib Swift entry point, exported by libswiftCore.
    let print = UInt(bitPattern: try #require(dlsym(nil, "$ss5print_9separator10terminatoryypd_S2StF")))
    let frame = try #require(symbolizer.frames(at: print, isReturnAddress: false).last)
    #expect(frame.swiftModule == "Swift")
    #expect(frame.symbol.hasPrefix("Swift.print("))
  }

  @Test func walksCInlinedScopes() throws {
    // clang honours always_inline even at -O0, so this covers debug builds too.
    let symbolizer = try Symbolizer()
    let address = UInt(CPerfSymbols_selfTestInlinedReturnAddress())
    let frames = symbolizer.frames(at: address, isReturnAddress: true)
    try #require(frames.count == 2)
    #expect(frames[0].isInlined)
    #expect(frames[0].symbol == "CPerfSymbols_inlinedProbe")
    #expect(frames[0].file?.hasSuffix("symbols.c") == true)
    #expect(!frames[1].isInlined)
    #expect(frames[1].symbol == "CPerfSymbols_selfTestInlinedReturnAddress")
    #expect(frames[1].file?.hasSuffix("symbols.c") == true)
    let inner = try #require(frames[0].line)
    let outer = try #require(frames[1].line)
    // The call site in the outer function follows the inlined function's body.
    #expect(outer > inner)
  }

  @Test func walksSwiftInlinedScopesInOptimizedBuilds() throws {
    let symbolizer = try Symbolizer()
    let capture = symbolizerInliningCaller()
    let frames = symbolizer.frames(at: try #require(capture.addresses.first), isReturnAddress: true)
    let outer = try #require(frames.last)
    #expect(!outer.isInlined)
    #if DEBUG
      // -Onone keeps @inline(__always) calls as calls: the capture is its own function.
      #expect(frames.count == 1)
      #expect(outer.symbol.contains("symbolizerInlinedCapture"))
    #else
      try #require(frames.count >= 2)
      let inlined = frames[0]
      #expect(inlined.isInlined)
      #expect(inlined.symbol.contains("symbolizerInlinedCapture"))
      #expect(inlined.swiftModule == "PerfHarnessTests")
      #expect(inlined.file?.hasSuffix("SymbolizerTests.swift") == true)
      #expect(abs((inlined.line ?? 0) - capture.line) <= 2)
      #expect(outer.symbol.contains("symbolizerInliningCaller"))
      #expect(outer.line == capture.callLine)
    #endif
  }

  @Test func symbolizesManyUniqueAddresses() throws {
    let symbolizer = try Symbolizer()
    let executableAddress = try #require(symbolizerProbeFunction().addresses.first)
    let runtimeAddress = UInt(bitPattern: try #require(dlsym(nil, "swift_retain")))
    // 2,500 addresses around each, odd strides so that they hit distinct instructions.
    let addresses =
      (0..<2500).map { executableAddress &- 20_000 &+ UInt($0) * 13 }
      + (0..<2500).map { runtimeAddress &- 200_000 &+ UInt($0) * 167 }
    let clock = ContinuousClock()
    var named = 0
    let elapsed = clock.measure {
      for address in addresses {
        let frames = symbolizer.frames(at: address, isReturnAddress: true)
        if frames.last?.mangledName != nil { named += 1 }
      }
    }
    print("Symbolizer: \(addresses.count) unique addresses in \(elapsed) (\(named) named)")
    #expect(named > addresses.count / 2)
  }
}
