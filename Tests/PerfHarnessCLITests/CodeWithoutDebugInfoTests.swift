import Foundation
import Testing

/// A C program built as Debian builds by default (`-O2`, no `-g`, no frame pointers) has a
/// symbol table but no debug info: its functions are still the program's code.
@Suite("A program built without debug info")
struct CodeWithoutDebugInfoTests {
  let perfharness = try! BuiltBinary("perfharness")

  static let source = """
    #include <time.h>
    static double cpu(void) {
      struct timespec t;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      return t.tv_sec + t.tv_nsec / 1e9;
    }
    __attribute__((noinline)) static unsigned long spin_inner(unsigned long x) {
      for (int i = 0; i < 100000; i++) x = x * 6364136223846793005ul + 1442695040888963407ul;
      return x;
    }
    __attribute__((noinline)) static unsigned long spin_outer(double seconds) {
      unsigned long x = 1;
      for (double start = cpu(); cpu() - start < seconds;) x = spin_inner(x);
      return x;
    }
    int main(void) { return (int)(spin_outer(0.3) & 1) * 0; }
    """

  @Test("Its functions are app code: they lead the call tree, and the report names them")
  func functionsAreAppCode() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let source = directory.appendingPathComponent("spin.c")
    try Data(Self.source.utf8).write(to: source)
    let program = directory.appendingPathComponent("spin")
    try compileC(source, flags: ["-O2", "-fomit-frame-pointer"], to: program)
    let output = directory.appendingPathComponent("out")
    let result = try perfharness.run(["record", "--instruments", "time", "--output", output.path, "--", program.path])
    #expect(result.status == 0, "\(result.standardError)")
    #expect(!result.standardOutput.contains("No program function was sampled"), "\(result.standardOutput)")
    let data = try Data(contentsOf: output.appendingPathComponent("spin/report.json"))
    let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    let threads = try #require((report["timeProfile"] as? [String: Any])?["threads"] as? [[String: Any]])
    let main = try #require(threads.first { $0["isMain"] as? Bool == true })
    let top = try #require((main["topFunctions"] as? [[String: Any]])?.first)
    #expect(top["symbol"] as? String == "spin_inner", "\(main)")
    #expect(top["isApp"] as? Bool == true)
  }
}
