import BenchWorkloads
import Foundation
import Testing

@testable import PerfHarness

extension ProcessWideRecording {
  /// Work that repeats at exactly the sampling period (PeriodicWorkload: 1 ms units of CPU
  /// time split 50/30/20) against its own per-call truth. With fixed periods the samples
  /// keep landing on a few phases of the unit and the split is tens of points off
  /// (PERFHARNESS_DITHER=0 makes this suite fail); dithered, the samples' phases are
  /// independent and the errors are those of random sampling.
  @Suite("Dithered sampling periods", .serialized)
  struct PeriodDitherTests {
    struct Run {
      var truth: [Double]
      var measured: [Double]
      var samples: Int
      /// Measured minus truth, in standard deviations of random sampling with this run's
      /// sample count: binomial, times sqrt(1 + 1/12) because each sample weighs the gap
      /// before it, uniform in [0.5, 1.5] periods and independent of where it lands, which
      /// adds the gaps' relative variance (1/12) to a weighted share's.
      var z: [Double] {
        (0..<3).map { i in
          let p = truth[i] / 100
          let sd = 100 * (p * (1 - p) / Double(max(samples, 1)) * (1 + 1.0 / 12)).squareRoot()
          return (measured[i] - truth[i]) / sd
        }
      }
    }

    static func profile(cpuNanoseconds: UInt64) throws -> Run {
      let profiler = TimeProfiler(clock: .cpu, rateHz: 1000)
      try profiler.start()
      let truth = Truth()
      let tid = SamplingSessionTests.onNewThread {
        truth.value = PeriodicWorkload.run(cpuNanoseconds: cpuNanoseconds)
        return 0
      }.tid
      profiler.stop()
      let report = try profiler.report()
      let thread = try #require(report.profile.threads.firstIndex(where: { $0.threadID == tid }))
      let functions = report.profile.topFunctions(threads: [thread], hideSystemLibraries: true)
      // Totals: the clock reads inside each function are its own time, on both sides.
      let weights = PeriodicWorkload.functions.map { name in
        functions.first { $0.symbol.contains(name + "(") }?.totalPercent ?? 0
      }
      let total = weights.reduce(0, +)
      let samples = report.threads.first { $0.threadID == tid }?.sampleCount ?? 0
      #expect(report.periodDithered == (getenv("PERFHARNESS_DITHER").map { String(cString: $0) != "0" } ?? true))
      return Run(truth: truth.value, measured: weights.map { total > 0 ? $0 / total * 100 : 0 }, samples: samples)
    }

    final class Truth: @unchecked Sendable { var value: [Double] = [] }

    @Test(
      "work in step with the period is split as its truth, within random sampling's error", .samplesWhereTheSignalLands)
    func periodicWorkSplit() throws {
      // Six runs of 1 s: ~1000 samples each, ±1.6 points (one SD) on the 50 % share.
      let runs = try (0..<6).map { _ in try Self.profile(cpuNanoseconds: 1_000_000_000) }
      let summary = runs.map { run in
        "truth \(run.truth.map { String(format: "%.1f", $0) }) measured \(run.measured.map { String(format: "%.1f", $0) }) n=\(run.samples)"
      }.joined(separator: "; ")
      for run in runs { #expect(run.samples > 700, "\(summary)") }
      let z = runs.flatMap(\.z)
      let rms = (z.map { $0 * $0 }.reduce(0, +) / Double(z.count)).squareRoot()
      // Bounds that random sampling exceeds in about 1 suite of 3,000 in all (each z is then
      // a standard normal, the 18 being 6 runs of a 3-way multinomial split): an rms over 2
      // (about 1 in 50,000), one |z| of the 18 over 4.5 (1 in 7,000), or a function's mean z
      // over the 6 runs, whose SD is 1/sqrt(6), over 4/sqrt(6) (1 in 6,000). Aliasing puts
      // runs tens of SD off; weights that favour one phase of the unit, several SD in most
      // runs; a bias that every run shares, the mean z.
      #expect(rms <= 2, "rms error \(rms) SD: \(summary)")
      #expect(z.allSatisfy { abs($0) <= 4.5 }, "z \(z.map { String(format: "%.1f", $0) }): \(summary)")
      for i in 0..<3 {
        let meanZ = runs.map { $0.z[i] }.reduce(0, +) / Double(runs.count)
        #expect(
          abs(meanZ) * Double(runs.count).squareRoot() <= 4,
          "\(PeriodicWorkload.functions[i]) mean z \(meanZ): \(summary)")
      }
    }
  }
}
