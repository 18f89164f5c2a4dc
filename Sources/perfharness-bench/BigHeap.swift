import BenchWorkloads
import Foundation
import PerfHarness

// The 4 M-block heap (#26) in a process of its own, so that its peak memory is its own and
// not what earlier bench sections left: `perfharness-bench --big-heap none|leaks` runs it
// once and prints what the leaks instrument measured, as one JSON line.

nonisolated(unsafe) var bigHeapKept: [ChurnNode] = []

struct BigHeapRun: Codable {
  var analysisMilliseconds: Double
  var blocksScanned: Int
  var scannerMiB: Double
  /// Filled in by the parent, from wait4.
  var peakResidentMiB: Double = 0
}

func runBigHeap(leaks: Bool) -> BigHeapRun {
  let scenario = Scenario(
    "four-million-live-blocks", summary: "bench workload", variants: [.starter], defaultIterations: 1
  ) { context in
    bigHeapKept = (0..<4_000_000).map { ChurnNode($0) }
    context.markGeneration("kept")
  }
  let report = MainActor.assumeIsolated {
    ScenarioRunner(configuration: RecordingConfiguration(instruments: leaks ? [.leaks] : [], allocationStacks: false))
      .run(scenario, variant: .starter, iterations: 1)
  }
  return BigHeapRun(
    analysisMilliseconds: report.leaks?.analysisMilliseconds ?? 0, blocksScanned: report.leaks?.blocksScanned ?? 0,
    scannerMiB: Double(report.leaks?.scannerBytes ?? 0) / 1_048_576)
}

/// Runs `executable` with `arguments` and returns its last line of output with its peak
/// resident memory (the kernel's count, from wait4), or nil if it failed.
func runMeasuringPeakMemory(_ executable: String, _ arguments: [String]) -> BigHeapRun? {
  let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("perfharness-bench-\(UUID()).out").path
  defer { try? FileManager.default.removeItem(atPath: outputPath) }
  var actions = posix_spawn_file_actions_t()
  posix_spawn_file_actions_init(&actions)
  defer { posix_spawn_file_actions_destroy(&actions) }
  posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
  let argv = ([executable] + arguments).map { strdup($0) } + [nil]
  defer { for argument in argv { free(argument) } }
  var pid: pid_t = 0
  guard posix_spawn(&pid, executable, &actions, nil, argv, environ) == 0 else { return nil }
  var status: Int32 = 0
  var usage = rusage()
  while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
  guard status == 0, let text = try? String(contentsOfFile: outputPath, encoding: .utf8),
    let line = text.split(separator: "\n").last,
    var run = try? JSONDecoder().decode(BigHeapRun.self, from: Data(line.utf8))
  else { return nil }
  run.peakResidentMiB = Double(usage.ru_maxrss) / 1024
  return run
}
