import Foundation
import Testing

/// `bench-sampling-floor`, whose runs `make bench` turns into the sampling floor's
/// rows: each source runs once per round and counts what it took. The times are the
/// bench's to judge; what is checked here is that every run is there and its overflows
/// were counted, with and without the signal.
@Suite struct SamplingFloorTests {
  @Test func everySourceRunsAndCountsItsOverflows() throws {
    let result = try BuiltBinary("bench-sampling-floor").run(["2"])
    #expect(result.status == 0, "\(result.standardError)")
    var runs: [String: [(ms: Double, samples: Double)]] = [:]
    for line in result.standardOutput.split(separator: "\n") where line.hasPrefix("sampling-floor:") {
      var fields: [String: String] = [:]
      for pair in line.split(separator: " ").dropFirst() {
        let parts = pair.split(separator: "=", maxSplits: 1)
        if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
      }
      #expect(fields["error"] == "0", "\(line)")
      let run = (ms: Double(fields["ms"] ?? "") ?? 0, samples: Double(fields["samples"] ?? "") ?? -1)
      runs[fields["source"] ?? "?", default: []].append(run)
    }
    #expect(runs.keys.sorted() == ["event", "none", "signal"], "\(result.standardOutput)")
    for (source, sourceRuns) in runs {
      #expect(sourceRuns.count == 2, "\(source)")
      for run in sourceRuns {
        if source == "none" {
          #expect(run.samples == 0)
          continue
        }
        // 4 kHz of the thread's CPU time, which its wall time bounds: at most one overflow
        // per 250 µs of the run.
        let ceiling = run.ms * 4 + 2
        #expect(run.samples > 0 && run.samples <= ceiling, "\(source): \(run.samples) overflows in \(run.ms) ms")
      }
    }
  }
}
