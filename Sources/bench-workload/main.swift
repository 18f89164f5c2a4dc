// The bench's allocation workloads alone, without perfharness linked in, for the peers
// (heaptrack, valgrind, an AddressSanitizer build) and `perfharness record` to run: `NAME`
// runs one (churn when none is named) and prints the time it took, measured inside;
// `keep COUNT` makes COUNT small objects and keeps them until exit (a heap for leak checks).
// `periodic SECONDS`: work in step with the 1 kHz period (PeriodicWorkload).
// `split SECONDS`: the Time Profiler's accuracy workload for `perf record`, for that much CPU
// time. BENCH_IDLE_THREAD=1 starts an idle thread first (see below).
import BenchWorkloads
import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.count == 2, arguments[0] == "split", let seconds = Double(arguments[1]) {
  SplitWorkload.run(cpuNanoseconds: UInt64(seconds * 1e9))
  exit(0)
}
// `periodic SECONDS`: work repeating at the 1 kHz period, for `perf record`; prints the run's
// truth (each function's share of their CPU time, timed around every call).
if arguments.count == 2, arguments[0] == "periodic", let seconds = Double(arguments[1]) {
  let truth = PeriodicWorkload.run(cpuNanoseconds: UInt64(seconds * 1e9))
  print("periodic-truth: " + truth.map { String($0) }.joined(separator: " "))
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
// BENCH_IDLE_THREAD=1: one idle thread first, as the preloaded recorder's own threads make.
// glibc's malloc then runs in its multi-threaded mode (an arena lock wherever the thread cache
// misses): the bench separates that from what tracking costs.
if getenv("BENCH_IDLE_THREAD") != nil { startIdleThread() }
let start = ContinuousClock.now
if let keepCount { keptUntilExit = (0..<keepCount).map { ChurnNode($0) } } else { workload?.run() }
let elapsed = (ContinuousClock.now - start).components
print("workload-ms: \(Double(elapsed.seconds) * 1000 + Double(elapsed.attoseconds) / 1e15)")
