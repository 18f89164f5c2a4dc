import BenchWorkloads
import Foundation

/// What tracking allocations costs on workloads unlike the churn bench's (issue #26): long-lived
/// object graphs, Foundation's JSON coding, four threads at once. Every tool runs the same
/// binary, bench-workload (an AddressSanitizer build of it for ASan+LSan), in its own process;
/// each figure is the median of its rounds' ratios against the untracked run of the same round.
/// perfharness runs as `perfharness record`, preloaded, as heaptrack is.
func measureWorkloads(perfharness: String, workload: String, rounds: Int, scratch: URL) throws -> [Figure] {
  // Built by `make bench` (`--sanitize=address`, its own scratch path).
  let asanWorkload =
    FileManager.default.isExecutableFile(atPath: ".build-asan/release/bench-workload")
    ? ".build-asan/release/bench-workload" : nil
  let heaptrack = tool("heaptrack")
  let valgrind = tool("valgrind")
  var figures: [Figure] = []
  for kind in AllocationWorkload.allCases {
    FileHandle.standardError.write(Data("bench: workload \(kind.rawValue), \(rounds) rounds\n".utf8))
    var ratios: [String: [Double]] = [:]
    var plainTimes: [Double] = []
    for round in 0..<rounds {
      guard let plain = try timedRun([workload, kind.rawValue]) else { continue }
      plainTimes.append(plain)
      let output = ["--output", scratch.appendingPathComponent("record").path, "--"]
      var commands: [(name: String, prefix: [String], binary: String, environment: [String: String])] = [
        (
          "countsOnly",
          [perfharness, "record", "--instruments", "allocations", "--no-allocation-stacks", "--format", "json"]
            + output, workload, [:]
        ),
        (
          "fullStacks", [perfharness, "record", "--instruments", "allocations", "--format", "json"] + output, workload,
          [:]
        ),
      ]
      // The program alone with one idle thread: what any thread costs it before any tracking
      // (glibc's malloc in its multi-threaded mode), as the recorder's would with
      // --mark-every or the Time Profiler.
      commands.append(("idleThread", [], workload, ["BENCH_IDLE_THREAD": "1"]))
      if let heaptrack {
        let file = scratch.appendingPathComponent("heaptrack-\(round)").path
        commands.append(("heaptrack", [heaptrack, "--raw", "-o", file], workload, [:]))
      }
      if let asanWorkload {
        // LeakSanitizer's scan at exit is not in the time, which is the workload's own.
        commands.append(("asan", [], asanWorkload, ["ASAN_OPTIONS": "detect_leaks=1"]))
      }
      // memcheck runs 20-50 times slower: one round is enough to place it.
      if let valgrind, round == 0 {
        commands.append(("memcheck", [valgrind, "--tool=memcheck", "--leak-check=full", "--quiet"], workload, [:]))
      }
      for command in round % 2 == 0 ? commands : commands.reversed() {
        if let time = try timedRun(command.prefix + [command.binary, kind.rawValue], environment: command.environment) {
          ratios[command.name, default: []].append(time / plain)
        }
      }
    }
    func ratio(_ name: String) -> Double { ratios[name].map(median) ?? .nan }
    let peers = [("heaptrack", "heaptrack"), ("asan", "ASan+LSan"), ("memcheck", "memcheck")].map { key, label in
      ratios[key] == nil ? "\(label) did not run" : String(format: "%@ %.2fx", label, ratio(key))
    }.joined(separator: ", ")
    for (name, label, target) in [
      ("countsOnly", "types and counts", kind == .threads ? 2.0 : 1.3),
      ("fullStacks", "full stacks", kind == .threads ? 2.0 : 1.6),
    ] {
      let measured = ratio(name)
      // Below both peers that keep a heap's state live as it runs (heaptrack, ASan), and
      // within the target.
      let belowPeers = ["heaptrack", "asan"].allSatisfy { ratios[$0] == nil || measured < ratio($0) }
      figures.append(
        Figure(
          name: "Allocations on \(kind.rawValue), \(label) (perfharness record): wall time vs untracked",
          measured: measured, unit: "x", target: String(format: "<= %.1fx, below heaptrack and ASan", target),
          meetsTarget: measured.isNaN ? nil : measured <= target && belowPeers,
          detail: String(
            format:
              "%@; median of %d rounds' ratios, untracked median %.0f ms; the program with one idle thread of its own (glibc's malloc in its multi-threaded mode, as --mark-every's or the Time Profiler's threads put it): %.2fx; same binary: %@",
            kind.summary, ratios[name]?.count ?? 0, plainTimes.isEmpty ? Double.nan : median(plainTimes),
            ratio("idleThread"), peers)))
    }
  }
  return figures
}
