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
  /// The process's own peak (VmHWM), read as it ends.
  var peakResidentMiB: Double
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
    scannerMiB: Double(report.leaks?.scannerBytes ?? 0) / 1_048_576, peakResidentMiB: peakResidentMiB())
}

/// Runs `executable` with `arguments` and returns the run it printed (its last line).
func runBigHeapChild(_ executable: String, _ arguments: [String]) throws -> BigHeapRun? {
  guard let output = try runQuietly([executable] + arguments), let line = output.split(separator: "\n").last else {
    return nil
  }
  return try? JSONDecoder().decode(BigHeapRun.self, from: Data(line.utf8))
}

/// This process's peak resident memory (VmHWM), in MiB. Read by the process itself: a child's
/// rusage would not do, since a child started by vfork (as posix_spawn does) takes its
/// parent's resident size into its own peak when it execs.
func peakResidentMiB() -> Double {
  let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
  guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
    let kibibytes = line.split(separator: " ").compactMap({ Double($0) }).first
  else { return .nan }
  return kibibytes / 1024
}
