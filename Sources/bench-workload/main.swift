// The bench's allocation workloads alone, without perfharness linked in, for the peers
// (heaptrack, valgrind, an AddressSanitizer build) and `perfharness record` to run: `NAME`
// runs one (churn when none is named) and prints the time it took, measured inside;
// `keep COUNT` makes COUNT small objects and keeps them until exit (a heap for leak checks).
// `split SECONDS`: the Time Profiler's accuracy workload for `perf record`, for that much CPU
// time. `sampling-floor ROUNDS`: what a sample costs here before a profiler's own work.
import BenchWorkloads
import CBenchSampling
import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
// `sampling-floor ROUNDS`: the plain loop, then under a cpu-clock perf event without and
// with a signal per overflow, ROUNDS times; one line per run for the bench to pair.
if arguments.count == 2, arguments[0] == "sampling-floor", let rounds = Int(arguments[1]), rounds > 0 {
  let sources: [(String, CBenchSampling_Source)] = [
    ("none", CBenchSampling_None), ("event", CBenchSampling_EventOnly), ("signal", CBenchSampling_EventSignal),
  ]
  for round in 0..<rounds {
    // Each round starts with a different source, so no source always runs first.
    for offset in 0..<sources.count {
      let (name, source) = sources[(round + offset) % sources.count]
      let run = CBenchSampling_run(source, 4000, 60_000)
      print(
        "sampling-floor: round=\(round) source=\(name) ms=\(run.milliseconds) samples=\(run.samples) error=\(run.error)"
      )
    }
  }
  exit(0)
}
if arguments.count == 2, arguments[0] == "split", let seconds = Double(arguments[1]) {
  SplitWorkload.run(cpuNanoseconds: UInt64(seconds * 1e9))
  exit(0)
}
// `keep COUNT`: COUNT small objects kept until exit, for a leak check at exit to scan.
nonisolated(unsafe) var keptUntilExit: [ChurnNode] = []
let keepCount = arguments.count == 2 && arguments[0] == "keep" ? Int(arguments[1]).flatMap { $0 > 0 ? $0 : nil } : nil
let workload = arguments.count <= 1 ? AllocationWorkload(rawValue: arguments.first ?? "churn") : nil
guard keepCount != nil || workload != nil else {
  let names = AllocationWorkload.allCases.map(\.rawValue).joined(separator: ", ")
  let message =
    "error: unknown arguments '\(arguments.joined(separator: " "))'; accepted: one of \(names), split SECONDS or keep COUNT\n"
  _ = message.withCString { write(2, $0, strlen($0)) }
  exit(64)
}
let start = ContinuousClock.now
if let keepCount { keptUntilExit = (0..<keepCount).map { ChurnNode($0) } } else { workload?.run() }
let elapsed = (ContinuousClock.now - start).components
print("workload-ms: \(Double(elapsed.seconds) * 1000 + Double(elapsed.attoseconds) / 1e15)")
