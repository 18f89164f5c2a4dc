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
    // C code in the executable: app code has debug info (PLT stubs and CRT code such as
    // _init do not), and the harness's own C targets are prefixed CPerf.
    guard frame.file != nil else { return false }
    return !frame.symbol.hasPrefix("CPerf") && frame.harnessCTarget == nil
  }
}
