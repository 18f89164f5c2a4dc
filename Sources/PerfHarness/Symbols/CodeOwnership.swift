/// Whose code a frame is: the program's (app code, what Hide System Libraries keeps), or the
/// harness's, the standard library's and the system's. The Time Profiler and Allocations
/// both ask here.
enum CodeOwnership {
  /// Modules of the harness itself: statically linked into the executable, but not the
  /// profiled program's code, so Hide System Libraries treats them as system code.
  static let harnessModules: Set<String> = [
    "PerfHarness", "PerfHarnessCLI", "PerfReports", "ArgumentParser", "ArgumentParserToolInfo",
  ]

  static let compilerThunkPrefixes = [
    "partial apply forwarder for ", "reabstraction thunk helper", "thunk for ", "protocol witness for ",
    "merged ", "outlined ",
  ]

  /// App code is the executable's own code, less the harness and the standard library's
  /// specializations that the compiler emitted into it.
  static func isAppCode(_ frame: SymbolizedFrame) -> Bool {
    // Debug info names compiler-made code "<compiler-generated>", sometimes under a
    // directory ("//<compiler-generated>").
    guard frame.isMainExecutable, !(frame.file?.hasSuffix("<compiler-generated>") ?? false) else { return false }
    // Compiler plumbing between app functions says nothing a reader can act on.
    if compilerThunkPrefixes.contains(where: frame.symbol.hasPrefix) { return false }
    // Runtime helpers the compiler emits into every Swift binary (__swift_instantiate…).
    if frame.symbol.hasPrefix("__swift") { return false }
    if let module = frame.swiftModule {
      return !harnessModules.contains(module) && module != "Swift" && module != "__C"
    }
    // Swift code whose module the name does not give: thunks and specializations of
    // generic library code.
    if let mangled = frame.mangledName, mangled.hasPrefix("$s") || mangled.hasPrefix("_$s") { return false }
    // C code in the executable. When it has debug info, app code has it (PLT stubs and CRT
    // code such as _init do not), and the harness's own C targets are prefixed CPerf.
    guard frame.file != nil else { return !frame.imageHasDebugInfo && isUndocumentedAppCode(frame.symbol) }
    return !frame.symbol.hasPrefix("CPerf") && frame.harnessCTarget == nil
  }

  /// What the C runtime's start files (crt1.o, crti.o, crtbegin.o) link into every
  /// executable.
  static let startFileSymbols: Set<String> = [
    "_start", "_init", "_fini", "deregister_tm_clones", "register_tm_clones", "__do_global_dtors_aux",
    "frame_dummy", "__libc_csu_init", "__libc_csu_fini", "_dl_relocate_static_pie",
  ]

  /// Runtimes a Swift executable may link statically (`-static-stdlib`), when they come
  /// without debug info: the Swift runtime, Dispatch and CoreFoundation.
  static let staticRuntimePrefixes = ["swift_", "swift::", "_swift", "dispatch_", "_dispatch", "_CF", "__CF"]

  /// Code in an executable built without debug info (Debian's default `-O2`, no `-g`): every
  /// function is the program's but the start files', the linker's stubs and a runtime's.
  /// Reading none of it as app code made a C program's report say no program function was
  /// sampled, over a call tree of its own functions.
  private static func isUndocumentedAppCode(_ symbol: String) -> Bool {
    guard !symbol.hasPrefix("0x"), !symbol.hasSuffix("@plt"), !startFileSymbols.contains(symbol) else { return false }
    return !symbol.hasPrefix("CPerf") && !staticRuntimePrefixes.contains(where: symbol.hasPrefix)
  }
}
