// The bench's allocation workload alone, without perfharness linked in, for the peers to
// run; prints the time its loop took, measured inside.
import BenchWorkloads

var kept: [ChurnNode] = []
let start = ContinuousClock.now
churn(depth: 30, operations: churnOperations, kept: &kept)
let elapsed = (ContinuousClock.now - start).components
print("churn-ms: \(Double(elapsed.seconds) * 1000 + Double(elapsed.attoseconds) / 1e15)")
withExtendedLifetime(kept) {}
