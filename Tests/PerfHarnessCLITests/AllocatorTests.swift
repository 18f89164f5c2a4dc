import Foundation
import Testing

/// Programs on an allocator other than glibc's (jemalloc, tcmalloc; `make test` installs
/// them), and programs that end with `_exit` from a signal handler while they allocate.
@Suite("Other allocators, and _exit from a signal handler")
struct AllocatorTests {
  let perfharness = try! BuiltBinary("perfharness")
  let cProgram = try! BuiltBinary("record-target-c")

  static let jemalloc = "libjemalloc.so.2"
  static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures/RecordTargetC/main.c")

  private func report(_ directory: URL, _ name: String) throws -> [String: Any] {
    let data = try Data(contentsOf: directory.appendingPathComponent(name).appendingPathComponent("report.json"))
    return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
  }

  /// record-target-c's report as glibc's malloc gives it: 7 lost blocks of 100 bytes, 100
  /// list nodes in each generation between its marks.
  private func expectRecordedRight(_ result: BuiltBinary.Result, in directory: URL, name: String) throws {
    #expect(result.status == 0, "\(result.standardError)")
    let report = try report(directory, name)
    #expect(report["status"] as? String == "passed", "\(report["error"] ?? "")")
    let leaks = try #require(report["leaks"] as? [String: Any])
    #expect(leaks["leakedCount"] as? Int == 7)
    #expect(leaks["leakedBytes"] as? Int == 700)
    let generations = try #require((report["allocations"] as? [String: Any])?["generations"] as? [[String: Any]])
    #expect(generations.count == 4)
    for generation in generations.dropFirst().dropLast() {
      #expect(generation["growthCount"] as? Int == 100, "\(generation)")
    }
  }

  @Test(
    "A program run with jemalloc or tcmalloc preloaded: recorded with the malloc family in front of it",
    arguments: ["libjemalloc.so.2", "libtcmalloc_minimal.so.4", "libtcmalloc.so.4"])
  func preloadedAllocator(library: String) throws {
    // Before, jemalloc's malloc_usable_size read blocks the hooks had taken from glibc's
    // malloc: SIGSEGV inside jemalloc, in the harness as in the program.
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run(
      ["record", "--output", directory.path, "--", cProgram.url.path], environment: ["LD_PRELOAD": library])
    try expectRecordedRight(result, in: directory, name: "record-target-c")
  }

  @Test("A program linked with jemalloc: recorded, its leaks and generations as with glibc's malloc")
  func linkedJemalloc() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let program = directory.appendingPathComponent("record-target-jemalloc")
    // -l: names the runtime library, so no -dev package is needed.
    try compile(Self.fixture, ["-fno-omit-frame-pointer", "-l:\(Self.jemalloc)", "-lpthread"], to: program)
    let output = directory.appendingPathComponent("out")
    let result = try perfharness.run(["record", "--output", output.path, "--", program.path])
    try expectRecordedRight(result, in: output, name: "record-target-jemalloc")
  }

  /// Builds `source` (C) with the toolchain's clang and `arguments` into `output`.
  private func compile(_ source: URL, _ arguments: [String], to output: URL) throws {
    try compileC(source, flags: ["-O1", "-g"] + arguments, to: output)
  }

  @Test("An allocator that defines malloc and free only: refused, exit 1 naming the library and what it lacks")
  func halfAnAllocator() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let source = directory.appendingPathComponent("half.c")
    try Data(
      """
      #include <stddef.h>
      extern void *__libc_malloc(size_t);
      extern void __libc_free(void *);
      void *malloc(size_t size) { return __libc_malloc(size); }
      void free(void *pointer) { __libc_free(pointer); }
      """.utf8
    ).write(to: source)
    let library = directory.appendingPathComponent("libhalf.so")
    try compile(source, ["-shared", "-fPIC"], to: library)
    let result = try perfharness.run(
      ["record", "--output", directory.appendingPathComponent("out").path, "--", cProgram.url.path],
      environment: ["LD_PRELOAD": library.path])
    #expect(result.status == 1, "\(result.standardError)")
    #expect(
      result.standardError.contains(
        "cannot record with the allocator in \(library.path): it defines malloc but not calloc"),
      "\(result.standardError)")
  }

  @Test("perfharness's own commands under LD_PRELOAD=libjemalloc.so.2: list and a scenario run")
  func harnessOnJemalloc() throws {
    let listed = try perfharness.run(["list"], environment: ["LD_PRELOAD": Self.jemalloc])
    #expect(listed.status == 0, "\(listed.standardError)")
    #expect(listed.standardOutput.contains("search-drill-downs"))
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let scenario = try perfharness.run(
      [
        "scenario", "search-drill-downs", "--iterations", "1", "--instruments", "allocations,leaks", "--output",
        directory.path,
      ], environment: ["LD_PRELOAD": Self.jemalloc])
    #expect(scenario.status == 0, "\(scenario.standardError)")
  }

  @Test(
    "_exit from a SIGALRM handler while two threads loop on malloc: ends at once, with its report or the loss named")
  func underscoreExitFromHandlerDuringMalloc() throws {
    // The marker thread waited for the table the interrupted malloc held entered: every run
    // took 30 s (EXIT_REPORT_WAIT_MS) and ended without a report or a word of why.
    for run in 0..<20 {
      let directory = try temporaryDirectory()
      defer { try? FileManager.default.removeItem(at: directory) }
      let started = ContinuousClock.now
      let result = try perfharness.run([
        "record", "--output", directory.path, "--", cProgram.url.path, "--alarm-exit",
      ])
      let elapsed = ContinuousClock.now - started
      #expect(elapsed < .seconds(5), "run \(run): \(elapsed)")
      let report = try report(directory, "record-target-c")
      if report["status"] as? String == "passed" {
        #expect(result.status == 0, "run \(run): \(result.standardError)")
        #expect(report["leaks"] is [String: Any], "run \(run)")
      } else {
        // The recorder names the loss on the program's stderr and in the report.
        #expect(result.status == 3, "run \(run): \(result.standardError)")
        let error = report["error"] as? String ?? ""
        #expect(
          error.contains("_exit() was called from a signal handler that interrupted malloc"), "run \(run): \(error)")
        #expect(result.standardError.contains("perfharness: no report: _exit()"), "run \(run)")
      }
    }
  }

  @Test("exit() from a thread the program started, after a malloc there: the report is written, every run")
  func exitFromAProgramThread() throws {
    // The thread's bottom frame is the recorder's thread start, which read as the thread
    // standing inside the recorder: the report was lost as if exit had interrupted malloc
    // (every run; an async @main program ends so).
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let source = directory.appendingPathComponent("exit-thread.c")
    try Data(
      """
      #include <pthread.h>
      #include <stdlib.h>
      static void *run(void *unused) {
        char *volatile block = malloc(100);
        (void)block;
        (void)unused;
        exit(0);
      }
      int main(void) {
        pthread_t thread;
        pthread_create(&thread, NULL, run, NULL);
        pthread_join(thread, NULL);
        return 1;
      }
      """.utf8
    ).write(to: source)
    let program = directory.appendingPathComponent("exit-thread")
    try compileC(source, flags: ["-O2", "-lpthread"], to: program)
    for run in 0..<5 {
      let output = directory.appendingPathComponent("out-\(run)")
      let result = try perfharness.run(["record", "--output", output.path, "--", program.path])
      #expect(result.status == 0, "run \(run): \(result.standardError)")
      let report = try report(output, "exit-thread")
      #expect(report["status"] as? String == "passed", "run \(run): \(report["error"] ?? "")")
      #expect(report["leaks"] is [String: Any], "run \(run)")
    }
  }
}
