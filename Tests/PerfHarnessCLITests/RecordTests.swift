import Foundation
import LeakCorpusCases
import PerfHarness
import Testing

@testable import PerfHarnessCLI

/// `perfharness record -- CMD`: programs that know nothing of perfharness (they do not link
/// it), recorded through the preloaded library.
@Suite("Recording unmodified programs")
struct RecordTests {
  let perfharness = try! BuiltBinary("perfharness")
  let swiftProgram = try! BuiltBinary("record-target-swift")
  let cProgram = try! BuiltBinary("record-target-c")

  private func report(_ directory: URL, _ name: String) throws -> [String: Any] {
    let data = try Data(contentsOf: directory.appendingPathComponent(name).appendingPathComponent("report.json"))
    return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
  }

  /// The recorded program's pid, from the "ready, pid N" line both record targets print.
  private static func programPid(_ running: BuiltBinary.Running) throws -> Int32 {
    #expect(running.waitForStandardError(containing: "ready, pid"), "\(running.standardErrorSoFar)")
    let line = running.standardErrorSoFar.split(separator: "\n").first { $0.contains("ready, pid") } ?? ""
    return try #require(Int32(line.split(separator: " ").last ?? ""))
  }

  private static func typeNames(_ generation: [String: Any]) -> [String] {
    ((generation["categories"] as? [[String: Any]]) ?? []).compactMap { $0["name"] as? String }
  }

  @Test("A Swift program: its retain cycle named, its cache's growth by type in every --mark-every generation")
  func swiftProgramCycleAndGrowth() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "record", "--output", directory.path, "--mark-every", "0.3", "--", swiftProgram.url.path, "--seconds", "1.2",
    ])
    #expect(result.status == 0, "\(result.standardError)")
    let report = try report(directory, "record-target-swift")
    let program = try #require(report["program"] as? [String: Any])
    #expect(program["exitStatus"] as? Int == 0)
    #expect((program["arguments"] as? [String]) == ["--seconds", "1.2"])
    let leaks = try #require(report["leaks"] as? [String: Any])
    let cycles = try #require(leaks["cycles"] as? [[String: Any]])
    let cycleTypes = cycles.map { (($0["nodes"] as? [[String: Any]]) ?? []).compactMap { $0["type"] as? String } }
    #expect(cycleTypes.count == 1, "\(cycleTypes)")
    #expect(Set(cycleTypes.first ?? []) == ["record_target_swift.Ledger", "record_target_swift.Auditor"])
    let marks = try #require(report["marks"] as? [[String: Any]])
    #expect(marks.count >= 3, "\(marks)")
    #expect(marks.allSatisfy { ($0["label"] as? String)?.hasPrefix("at ") == true })
    let generations = try #require((report["allocations"] as? [String: Any])?["generations"] as? [[String: Any]])
    // Every generation between two marks grew the cache, by type.
    for generation in generations.dropFirst().dropLast() {
      #expect(Self.typeNames(generation).contains("record_target_swift.Thumbnail"), "\(generation)")
    }
  }

  /// The rings of each instance of a shape that record-target-swift leaked, by sorted short
  /// type names.
  private func rings(_ directory: URL) throws -> [[String]: Int] {
    let leaks = try #require(try report(directory, "record-target-swift")["leaks"] as? [String: Any])
    var rings: [[String]: Int] = [:]
    for cycle in (leaks["cycles"] as? [[String: Any]]) ?? [] {
      let types = ((cycle["nodes"] as? [[String: Any]]) ?? []).compactMap { $0["type"] as? String }
      rings[types.map(LeakShapes.shortTypeName).sorted(), default: 0] += (cycle["instances"] as? Int) ?? 0
    }
    return rings
  }

  @Test(
    "A closure a generic extension made, capturing a handler typed by an associated type: recorded whole, its cycles counted",
    arguments: ["time,allocations,leaks", "allocations", "leaks"])
  func genericHandlerCapture(instruments: String) throws {
    // The runtime aborted the program when asked to name that capture without its generic
    // context: no report at all, with Allocations or Leaks on.
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let routes = 40
    let result = try perfharness.run([
      "record", "--instruments", instruments, "--format", "json", "--output", directory.path, "--",
      swiftProgram.url.path, "--seconds", "0.1", "--leak-shape", "shape-generic-handler", "\(routes)",
    ])
    #expect(result.status == 0, "\(result.standardError)")
    let report = try report(directory, "record-target-swift")
    #expect((report["program"] as? [String: Any])?["exitStatus"] as? Int == 0)
    if instruments.contains("leaks") {
      // The route, the reabstraction thunk's context, the generic one and the handler's.
      let rings = try rings(directory)
      #expect(rings[["ShapeRoute", "closure context", "closure context", "closure context"]] == routes, "\(rings)")
    } else {
      let generations = try #require((report["allocations"] as? [String: Any])?["generations"] as? [[String: Any]])
      #expect(generations.flatMap(Self.typeNames).contains { $0.hasPrefix("closure context") })
    }
  }

  @Test(
    "Overlapping rings: a parent's closure self-loop and its children's ring are both reported, in every instance",
    arguments: ["time,allocations,leaks", "leaks"])
  func overlappingRings(instruments: String) throws {
    // Only the self-loop was reported; fixing the capture still leaked through the children.
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let families = 30
    let result = try perfharness.run([
      "record", "--instruments", instruments, "--format", "json", "--output", directory.path, "--",
      swiftProgram.url.path, "--seconds", "0.1", "--leak-shape", "shape-overlapping-rings", "\(families)",
    ])
    #expect(result.status == 0, "\(result.standardError)")
    let rings = try rings(directory)
    #expect(rings[["ShapeFamily"]] == families, "\(rings)")
    #expect(rings[["ShapeChild", "ShapeFamily", "_ContiguousArrayStorage"]] == families, "\(rings)")
  }

  @Test("A C program: its lost blocks leaked, its own perfharness_mark calls as generations, its hot function")
  func cProgramLeaksAndMarks() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run(["record", "--output", directory.path, "--", cProgram.url.path])
    #expect(result.status == 0, "\(result.standardError)")
    let report = try report(directory, "record-target-c")
    #expect(
      (report["marks"] as? [[String: Any]])?.compactMap { $0["label"] as? String } == ["first", "second", "third"])
    let leaks = try #require(report["leaks"] as? [String: Any])
    #expect(leaks["leakedCount"] as? Int == 7)
    #expect(leaks["leakedBytes"] as? Int == 700)
    let generations = try #require((report["allocations"] as? [String: Any])?["generations"] as? [[String: Any]])
    #expect(generations.count == 4)
    for generation in generations.dropFirst().dropLast() {
      #expect(generation["growthCount"] as? Int == 100, "\(generation)")
    }
    let top = (report["timeProfile"] as? [String: Any])?["topFunctions"] as? [[String: Any]]
    #expect(top?.first?["symbol"] as? String == "spin")
  }

  @Test("--leak-check-at-marks: the marker thread builds the memory graph at each mark, the cycle in every check")
  func leakCheckAtMarks() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "record", "--output", directory.path, "--leak-check-at-marks", "--mark-every", "0.2", "--", swiftProgram.url.path,
      "--seconds", "1",
    ])
    #expect(result.status == 0, "\(result.standardError)")
    let report = try report(directory, "record-target-swift")
    let checks = try #require((report["leaks"] as? [String: Any])?["checks"] as? [[String: Any]])
    #expect(!checks.isEmpty)
    for check in checks {
      #expect((check["cycles"] as? [[String: Any]])?.count == 1, "\(check)")
    }
  }

  @Test("A program that exits non-zero is exit 3, its status in the report")
  func exitStatus() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "record", "--output", directory.path, "--instruments", "allocations", "--", swiftProgram.url.path,
      "--seconds", "0.1", "--exit-status", "5",
    ])
    #expect(result.status == 3, "\(result.standardError)")
    let report = try report(directory, "record-target-swift")
    #expect(report["status"] as? String == "crashed")
    #expect((report["program"] as? [String: Any])?["exitStatus"] as? Int == 5)
    #expect((report["error"] as? String)?.contains("status 5") == true)
    #expect(report["allocations"] != nil)
  }

  @Test("A program that crashes is exit 3 with the report recorded until the signal")
  func crash() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "record", "--output", directory.path, "--", swiftProgram.url.path, "--seconds", "0.3", "--crash",
    ])
    #expect(result.status == 3, "\(result.standardError)")
    let report = try report(directory, "record-target-swift")
    #expect(report["status"] as? String == "crashed")
    let signal = (report["crash"] as? [String: Any])?["signal"] as? String
    #expect(signal == "SIGILL" || signal == "SIGTRAP", "\(report["crash"] ?? "no crash")")
    #expect((report["error"] as? String)?.contains("recorded until signal") == true, "\(report["error"] ?? "")")
    let categories = ((report["allocations"] as? [String: Any])?["categories"] as? [[String: Any]]) ?? []
    #expect(categories.contains { $0["name"] as? String == "record_target_swift.Thumbnail" })
    #expect((report["timeProfile"] as? [String: Any])?["sampleCount"] != nil)
  }

  @Test("SIGUSR2 to the program marks a generation; SIGTERM to the harness stops it with its report: exit 143")
  func signals() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let running = try perfharness.start([
      "record", "--output", directory.path, "--instruments", "allocations,leaks", "--", swiftProgram.url.path,
      "--seconds", "60",
    ])
    let pid = try Self.programPid(running)
    usleep(200_000)
    kill(pid, SIGUSR2)
    usleep(300_000)
    kill(running.pid, SIGTERM)
    let result = try running.wait()
    #expect(result.status == 143, "\(result.standardError)")
    let report = try report(directory, "record-target-swift")
    #expect(report["status"] as? String == "interrupted")
    #expect((report["program"] as? [String: Any])?["signal"] as? String == "SIGTERM")
    #expect((report["marks"] as? [[String: Any]])?.compactMap { $0["label"] as? String } == ["SIGUSR2"])
    let cycles = (report["leaks"] as? [String: Any])?["cycles"] as? [[String: Any]]
    #expect(cycles?.count == 1)
  }

  /// glibc's malloc runs lock-free until a process's first thread: the allocation
  /// instruments start none of theirs while the program has none of its own.
  @Test("Allocations and leaks leave a single-threaded program single-threaded; --mark-every starts the marker")
  func singleThreaded() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let quiet = try perfharness.run([
      "record", "--output", directory.path, "--instruments", "allocations,leaks", "--", cProgram.url.path,
    ])
    #expect(quiet.status == 0, "\(quiet.standardError)")
    #expect(quiet.standardOutput.contains("single-threaded: 1"), "\(quiet.standardOutput)")
    #expect((try report(directory, "record-target-c")["leaks"] as? [String: Any])?["leakedCount"] as? Int == 7)
    let marked = try perfharness.run([
      "record", "--output", directory.path, "--instruments", "allocations,leaks", "--mark-every", "10", "--",
      cProgram.url.path,
    ])
    #expect(marked.status == 0, "\(marked.standardError)")
    #expect(marked.standardOutput.contains("single-threaded: 0"), "\(marked.standardOutput)")
    // The program's first thread brings the recorder's two, started just before it.
    let threaded = try perfharness.run([
      "record", "--output", directory.path, "--instruments", "allocations", "--", cProgram.url.path, "--thread",
    ])
    #expect(threaded.status == 0, "\(threaded.standardError)")
    let names = threaded.standardOutput.split(separator: "\n").first { $0.hasPrefix("threads:") } ?? ""
    #expect(names.contains("perfharness-mar") && names.contains("crash-reporter"), "\(names)")
  }

  /// The program is inside malloc most of the time: the marker starts from the signal, or
  /// from its retry once the thread is out of malloc, and no mark is lost or doubled.
  @Test("SIGUSR2 to a single-threaded program inside malloc: every signal one mark, before its own marks")
  func marksInsideMalloc() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let running = try perfharness.start([
      "record", "--output", directory.path, "--instruments", "allocations", "--no-allocation-stacks", "--",
      cProgram.url.path, "--churn", "1.5",
    ])
    let pid = try Self.programPid(running)
    for _ in 0..<5 {
      usleep(150_000)
      kill(pid, SIGUSR2)
    }
    let result = try running.wait()
    #expect(result.status == 0, "\(result.standardError)")
    let labels = (try report(directory, "record-target-c")["marks"] as? [[String: Any]])?.compactMap {
      $0["label"] as? String
    }
    #expect(labels == Array(repeating: "SIGUSR2", count: 5) + ["first", "second", "third"], "\(labels ?? [])")
  }

  @Test("Before the program has a thread: a double free's partial report, and _exit's whole one")
  func crashAndExitWithoutThreads() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let crashed = try perfharness.run([
      "record", "--output", directory.path, "--instruments", "allocations", "--", cProgram.url.path, "--double-free",
    ])
    #expect(crashed.status == 3, "\(crashed.standardError)")
    let crash = try report(directory, "record-target-c")
    #expect((crash["crash"] as? [String: Any])?["signal"] as? String == "SIGABRT", "\(crash["crash"] ?? "none")")
    #expect((crash["error"] as? String)?.contains("recorded until signal 6") == true, "\(crash["error"] ?? "")")
    #expect((crash["marks"] as? [[String: Any]])?.count == 3)
    let exited = try perfharness.run([
      "record", "--output", directory.path, "--instruments", "allocations,leaks", "--", cProgram.url.path,
      "--underscore-exit",
    ])
    #expect(exited.status == 0, "\(exited.standardError)")
    let whole = try report(directory, "record-target-c")
    #expect(whole["status"] as? String == "passed")
    #expect((whole["leaks"] as? [String: Any])?["leakedCount"] as? Int == 7)
  }

  @Test("--timeout stops the program with SIGTERM: exit 3, timed out, what it recorded until then")
  func timeout() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "record", "--output", directory.path, "--timeout", "1", "--instruments", "allocations,leaks", "--",
      swiftProgram.url.path, "--seconds", "120",
    ])
    #expect(result.status == 3, "\(result.standardError)")
    let report = try report(directory, "record-target-swift")
    #expect(report["status"] as? String == "crashed")
    #expect((report["crash"] as? [String: Any])?["timedOut"] as? Bool == true)
    #expect((report["error"] as? String)?.contains("--timeout") == true)
    #expect(((report["leaks"] as? [String: Any])?["cycles"] as? [[String: Any]])?.count == 1)
    let bad = try perfharness.run(["record", "--timeout", "0", "--", swiftProgram.url.path])
    #expect(bad.status == 64 && bad.standardError.contains("--timeout must be between 1 and 86400"))
  }

  @Test("A program that ignores SIGTERM: killed --grace seconds after the harness's SIGTERM; exit 143, interrupted")
  func programIgnoringTerm() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let running = try perfharness.start([
      "record", "--output", directory.path, "--grace", "1", "--instruments", "allocations", "--",
      swiftProgram.url.path, "--ignore-term", "--seconds", "60",
    ])
    _ = try Self.programPid(running)
    let start = ContinuousClock.now
    kill(running.pid, SIGTERM)
    let result = try running.wait()
    // Before, the harness waited the program's 60 s out and exited 0, "passed".
    #expect(ContinuousClock.now - start < .seconds(15))
    #expect(result.status == 128 + SIGTERM, "\(result.standardError)")
    let report = try report(directory, "record-target-swift")
    #expect(report["status"] as? String == "interrupted")
    #expect((report["program"] as? [String: Any])?["signal"] as? String == "SIGKILL")
  }

  @Test("A recorded program dies with the harness, even when the harness is killed with SIGKILL")
  func programDiesWithTheHarness() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let running = try perfharness.start([
      "record", "--output", directory.path, "--instruments", "allocations", "--", swiftProgram.url.path,
      "--seconds", "60",
    ])
    let pid = try Self.programPid(running)
    kill(running.pid, SIGKILL)
    _ = try running.wait()
    let end = ContinuousClock.now + .seconds(10)
    while kill(pid, 0) == 0 && ContinuousClock.now < end { usleep(20_000) }
    let alive = kill(pid, 0) == 0
    if alive { kill(pid, SIGKILL) }
    #expect(!alive, "the program \(pid) outlived the harness")
  }

  @Test(
    "--format json: stdout is the report alone, the program's own output goes to stderr",
    arguments: ["json", "markdown"])
  func reportAloneOnStandardOutput(format: String) throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "record", "--output", directory.path, "--format", format, "--instruments", "allocations", "--",
      swiftProgram.url.path, "--seconds", "0.1", "--say", "PROGRAM-LINE",
    ])
    #expect(result.status == 0, "\(result.standardError)")
    #expect(result.standardError.contains("PROGRAM-LINE\n") && result.standardError.contains("cached "))
    if format == "json" {
      // The report names the program's arguments, PROGRAM-LINE among them: it must parse whole.
      let object = try JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8))
      #expect((object as? [String: Any])?["status"] as? String == "passed")
    } else {
      #expect(!result.standardOutput.contains("PROGRAM-LINE") && !result.standardOutput.contains("cached "))
    }
  }

  @Test(
    "No leak the recorder or ld.so made: long mark labels, dlopen of loaded libraries; the program's own 7 only",
    arguments: [["--long-labels"], ["--dlopen"], ["--long-labels", "--dlopen"]])
  func noLeaksOfTheRecordersOrTheLinkers(flags: [String]) throws {
    // A label of 16 bytes or more left a Swift.__StringStorage the recorder made; a dlopen of
    // libm, libstdc++ or libc left ld.so's dependency lists (56-88 B): both read as the
    // program's leaks, and a zero-leak gate failed on them.
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run(
      ["record", "--output", directory.path, "--instruments", "allocations,leaks", "--", cProgram.url.path] + flags)
    #expect(result.status == 0, "\(result.standardError)")
    let report = try report(directory, "record-target-c")
    let leaks = try #require(report["leaks"] as? [String: Any])
    // The program's own 7 lost blocks, and nothing else.
    #expect(leaks["leakedCount"] as? Int == 7, "\(leaks["rootLeaks"] ?? [])")
    if flags.contains("--long-labels") {
      let labels = (report["marks"] as? [[String: Any]])?.compactMap { $0["label"] as? String }
      #expect(labels == ["the first generation", "the second generation", "the third generation"])
    }
  }

  @Test("report --retainers: a leaked type answers where it leaked, first; an unknown type is exit 64 with suggestions")
  func retainersOfLeakedAndUnknownTypes() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let recorded = try perfharness.run([
      "record", "--output", directory.path, "--instruments", "allocations,leaks", "--", swiftProgram.url.path,
      "--seconds", "0.1", "--leak-shape", "shape-overlapping-rings", "5",
    ])
    #expect(recorded.status == 0, "\(recorded.standardError)")
    let file = directory.appendingPathComponent("record-target-swift/report.json").path
    // Before: "no instance of ShapeFamily allocated while recording is alive at its end",
    // after 80 lines of summary, beside # Persistent of it.
    let family = try perfharness.run(["report", file, "--retainers", "ShapeFamily"])
    #expect(family.status == 0, "\(family.standardError)")
    let lines = family.standardOutput.split(separator: "\n").map(String.init)
    #expect(lines.first == "ShapeFamily leaked: nothing reachable holds it", "\(family.standardOutput)")
    #expect(lines.contains { $0.contains("5 leaked in cycle") && $0.hasSuffix("ShapeFamily → ShapeFamily") })
    #expect(lines.contains { $0.contains("5 leaked in cycle") && $0.contains("ShapeChild → ShapeFamily") })
    let child = try perfharness.run(["report", file, "--retainers", "LeakCorpusCases.ShapeChild"])
    #expect(child.standardOutput.contains("10 leaked as indirect leaks"), "\(child.standardOutput)")
    let unknown = try perfharness.run(["report", file, "--retainers", "Shape"])
    #expect(unknown.status == 64, "\(unknown.standardOutput)")
    #expect(unknown.standardError.contains("has no type named Shape") && unknown.standardError.contains("ShapeFamily"))
  }

  @Test("A process the program fork+execs is recorded in a report of its own")
  func children() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "record", "--output", directory.path, "--instruments", "allocations,leaks", "--", "/bin/sh", "-c",
      "\(cProgram.url.path) > /dev/null; true",
    ])
    #expect(result.status == 0, "\(result.standardError)")
    let report = try report(directory, "sh")
    let children = try #require((report["program"] as? [String: Any])?["children"] as? [[String: Any]])
    #expect(children.count == 1)
    let folder = try #require(children.first?["report"] as? String)
    #expect((children.first?["executable"] as? String)?.hasSuffix("record-target-c") == true)
    let child = try self.report(directory.appendingPathComponent("sh"), folder)
    #expect((child["leaks"] as? [String: Any])?["leakedCount"] as? Int == 7)
    // The run's index links both reports.
    let index = try String(contentsOf: directory.appendingPathComponent("index.html"), encoding: .utf8)
    #expect(
      index.contains("href=\"sh/report.html\"") && index.contains("href=\"sh/\(folder)/report.html\""), "\(index)")
    #expect(result.standardOutput.hasSuffix("index: \(directory.appendingPathComponent("index.html").path)\n"))
  }

  /// The workload's split is by construction 680:260:50 iterations of the same loop
  /// (68.7/26.3/5.1 %). perf samples the same run as the preloaded profiler (it follows the
  /// harness into the program, on a fixed 1 ms of CPU time as ours), so both splits are of one
  /// execution and a loaded machine moves them alike: separate perf and profiler runs beside
  /// the rest of this suite on 2 cores came out 61/31/7 and 72/23/5, while one run sampled by
  /// both agrees within 0.4 to 1.2 points over 8 s beside two busy loops (6 runs). Under the
  /// suite's full load on 2 cores a run can still stray: once in CI perf gave 64.7/29.8/5.5
  /// while ours gave 67.8/26.1/6.1, ours within a point of the construction and perf 3.5 off
  /// it. A run outside 3 points is therefore run once more, and the second must agree; two
  /// profilers that disagreed for a reason of ours would disagree twice.
  @Test("The CPU split of a three-function workload under the preloaded profiler is perf's, within 3 points")
  func cpuSplit() throws {
    let first = try splitOfOneRun()
    guard let perf = first.perf, zip(first.ours, perf).contains(where: { abs($0 - $1) > 3 }) else { return }
    let second = try splitOfOneRun()
    let secondPerf = try #require(second.perf)
    for (share, reference) in zip(second.ours, secondPerf) {
      #expect(
        abs(share - reference) <= 3,
        "ours \(second.ours), perf \(secondPerf); the first run: ours \(first.ours), perf \(perf)")
    }
  }

  /// One run of the split workload under `record`, and under perf when the machine has it:
  /// the shares of the three functions, ours and perf's, in `splitFunctions`' order.
  func splitOfOneRun() throws -> (ours: [Double], perf: [Double]?) {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let workload = try BuiltBinary("bench-workload")
    let perfData = directory.appendingPathComponent("perf.data").path
    let record = ["record", "--output", directory.path, "--instruments", "time", "--", workload.url.path, "split", "8"]
    let underPerf = FileManager.default.isExecutableFile(atPath: "/usr/bin/perf")
    let result =
      underPerf
      ? try BuiltBinary(url: URL(fileURLWithPath: "/usr/bin/perf")).run(
        ["record", "-e", "cpu-clock:u", "-c", "1000000", "-q", "-o", perfData, "--", perfharness.url.path] + record)
      : try perfharness.run(record)
    #expect(result.status == 0, "\(result.standardError)")
    let top = try #require(
      (try report(directory, "bench-workload")["timeProfile"] as? [String: Any])?["topFunctions"] as? [[String: Any]])
    var ours: [String: Double] = [:]
    for function in top {
      let symbol = function["symbol"] as? String ?? ""
      for name in Self.splitFunctions where symbol.contains(".\(name)(") {
        ours[name, default: 0] += function["selfWeight"] as? Double ?? 0
      }
    }
    let shares = Self.shares(ours)
    let designed = Self.shares(["splitHeavy": 680, "splitMedium": 260, "splitLight": 50])
    #expect(shares[0] > shares[1] && shares[1] > shares[2], "\(shares)")
    for (share, expected) in zip(shares, designed) {
      #expect(abs(share - expected) <= 6, "ours \(shares), designed \(designed)")
    }
    // make test installs linux-perf; without it (a machine set up otherwise) only the shape
    // above is checked.
    guard underPerf else { return (shares, nil) }
    let perfReport = try BuiltBinary(url: URL(fileURLWithPath: "/usr/bin/perf")).run([
      "report", "-i", perfData, "--comm", "bench-workload", "--stdio", "--no-children", "--sort", "symbol", "-q",
    ])
    var perfWeights: [String: Double] = [:]
    for line in perfReport.standardOutput.split(separator: "\n") {
      guard
        let percent = line.split(separator: " ").first(where: { $0.hasSuffix("%") }).flatMap({ Double($0.dropLast()) })
      else { continue }
      for name in Self.splitFunctions where line.contains(name) { perfWeights[name, default: 0] += percent }
    }
    #expect(perfWeights.count == 3, "\(perfReport.standardOutput.prefix(2000))")
    return (shares, Self.shares(perfWeights))
  }

  static let splitFunctions = ["splitHeavy", "splitMedium", "splitLight"]

  static func shares(_ weights: [String: Double]) -> [Double] {
    let total = splitFunctions.reduce(0) { $0 + (weights[$1] ?? 0) }
    return splitFunctions.map { (weights[$0] ?? 0) / max(total, 1) * 100 }
  }

  @Test("A statically linked or setuid program is refused with the reason (exit 1); no program is exit 64")
  func refusals() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    // Debian's ldconfig is linked statically.
    let staticResult = try perfharness.run(["record", "--output", directory.path, "--", "/sbin/ldconfig", "-p"])
    #expect(staticResult.status == 1)
    #expect(staticResult.standardError.contains("statically linked"), "\(staticResult.standardError)")
    let setuid = directory.appendingPathComponent("setuid-program")
    try FileManager.default.copyItem(at: cProgram.url, to: setuid)
    chmod(setuid.path, 0o4755)
    let setuidResult = try perfharness.run(["record", "--output", directory.path, "--", setuid.path])
    #expect(setuidResult.status == 1)
    #expect(setuidResult.standardError.contains("setuid"), "\(setuidResult.standardError)")
    let none = try perfharness.run(["record", "--output", directory.path])
    #expect(none.status == 64)
    #expect(none.standardError.contains("after --"), "\(none.standardError)")
    let missing = try perfharness.run(["record", "--output", directory.path, "--", "no-such-program-anywhere"])
    #expect(missing.status == 64)
    #expect(missing.standardError.contains("no executable 'no-such-program-anywhere' on PATH"))
  }

  @Test("ELF headers: a dynamically linked executable names an interpreter, a static one does not")
  func elfInterpreter() throws {
    let dynamic = try #require(FileHandle(forReadingAtPath: "/bin/ls")?.readData(ofLength: 1 << 16))
    #expect(ELFHeader(dynamic)?.hasInterpreter == true)
    let stat = try #require(FileHandle(forReadingAtPath: "/sbin/ldconfig")?.readData(ofLength: 1 << 16))
    #expect(ELFHeader(stat)?.hasInterpreter == false)
    #expect(ELFHeader(Data("#!/bin/sh\n".utf8)) == nil)
  }
}
