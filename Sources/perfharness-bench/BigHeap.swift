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

/// The wall time of `command` and the time its workload reported (`workload-ms:`), in ms;
/// the wall time to timedRun's 20 ms polling, enough for runs of seconds.
func wallAndWorkload(_ command: [String], environment: [String: String] = [:]) throws -> (
  wall: Double, workload: Double
)? {
  let started = ContinuousClock.now
  guard let workload = try timedRun(command, environment: environment) else { return nil }
  return ((ContinuousClock.now - started).milliseconds, workload)
}

/// A leak check of 16 M live objects at exit (#26 asks faster than LeakSanitizer's): what each
/// adds after the program's own work. Ours: `perfharness record --instruments leaks`, its wall
/// time less the program's loop and less what the plain run spends outside its loop. LSan's:
/// the ASan build with `detect_leaks=1` less the same build with `detect_leaks=0`, loops aside.
/// Medians of `rounds` rounds, each running all four in turn: a single run of this much fresh
/// memory strayed by a second and more on this machine.
func measureLeakCheckAgainstLSan(
  perfharness: String, workload: String, scratch: URL, rounds: Int = 3
) throws -> Figure {
  let keep = ["keep", "16000000"]
  let asan = ".build-asan/release/bench-workload"
  let hasASan = FileManager.default.isExecutableFile(atPath: asan)
  var oursSeconds: [Double] = []
  var lsanSeconds: [Double] = []
  var oursWalls: [Double] = []
  var oursLoops: [Double] = []
  for _ in 0..<rounds {
    guard let plain = try wallAndWorkload([workload] + keep),
      let ours = try wallAndWorkload(
        [
          perfharness, "record", "--instruments", "leaks", "--format", "json", "--output",
          scratch.appendingPathComponent("keep").path, "--", workload,
        ] + keep)
    else { continue }
    oursSeconds.append((ours.wall - ours.workload - (plain.wall - plain.workload)) / 1000)
    oursWalls.append(ours.wall / 1000)
    oursLoops.append(ours.workload / 1000)
    if hasASan, let off = try wallAndWorkload([asan] + keep, environment: ["ASAN_OPTIONS": "detect_leaks=0"]),
      let on = try wallAndWorkload([asan] + keep, environment: ["ASAN_OPTIONS": "detect_leaks=1"])
    {
      lsanSeconds.append(((on.wall - on.workload) - (off.wall - off.workload)) / 1000)
    }
  }
  guard !oursSeconds.isEmpty else {
    return Figure(
      name: "Leaks: 16 M-block check at exit vs LeakSanitizer's", measured: .nan, unit: "s", target: "< LSan's",
      meetsTarget: nil, detail: "the runs failed")
  }
  let ours = median(oursSeconds)
  let lsan = lsanSeconds.isEmpty ? Double.nan : median(lsanSeconds)
  func list(_ values: [Double]) -> String { values.map { String(format: "%.2f", $0) }.joined(separator: ", ") }
  return Figure(
    name: "Leaks: 16 M-block check at exit vs LeakSanitizer's", measured: ours, unit: "s",
    target: "< LSan's", meetsTarget: lsan.isNaN ? nil : ours < lsan,
    detail: "bench-workload keep 16000000 (16 M small objects kept to exit), median of \(oursSeconds.count) rounds: "
      + String(format: "perfharness record --instruments leaks adds %.2f s after the program's loop", ours)
      + " (rounds: \(list(oursSeconds)); "
      + String(format: "its wall %.1f s, the loop %.1f s); ", median(oursWalls), median(oursLoops))
      + String(format: "LeakSanitizer's check adds %.2f s to the ASan build's run", lsan)
      + " (rounds: \(list(lsanSeconds)))")
}
