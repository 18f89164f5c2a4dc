// The bench's allocation workload alone, without perfharness linked in, for the peers to
// run; prints the time its loop took, measured inside. `split SECONDS`: the Time
// Profiler's accuracy workload for `perf record`, for that much CPU time.
import BenchWorkloads
import Glibc

if CommandLine.arguments.count == 3, CommandLine.arguments[1] == "split", let seconds = Double(CommandLine.arguments[2])
{
  SplitWorkload.run(cpuNanoseconds: UInt64(seconds * 1e9))
  exit(0)
}

var kept: [ChurnNode] = []
let start = ContinuousClock.now
churn(depth: 30, operations: churnOperations, kept: &kept)
let elapsed = (ContinuousClock.now - start).components
print("churn-ms: \(Double(elapsed.seconds) * 1000 + Double(elapsed.attoseconds) / 1e15)")
withExtendedLifetime(kept) {}
