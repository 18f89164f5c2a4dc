import BenchWorkloads
import Foundation
import Glibc
import PerfHarness

// Accuracy on work in step with the sampling period (PeriodicWorkload: 1 ms units of CPU
// time split 50/30/20, each run judged against its own per-call truth): the Time Profiler
// dithered, the same with fixed periods (PERFHARNESS_DITHER=0, the before) and `perf record
// -F 999` on `bench-workload periodic 1`, alternating in each round of one sitting.

/// One run's error per function (measured minus truth, points) and its sample count.
struct PeriodicRun {
  var errors: [Double]
  var truth: [Double]
  var samples: Int
  /// The sampler's handler, median per sample (µs); nil for perf.
  var handlerMedian: Double? = nil
  /// The errors in binomial standard deviations of the run's sample count.
  var z: [Double] {
    (0..<3).map { i in
      let p = truth[i] / 100
      return errors[i] / (100 * (p * (1 - p) / Double(max(samples, 1))).squareRoot())
    }
  }
}

final class PeriodicTruth: @unchecked Sendable { var value: [Double] = [] }
let periodicTruth = PeriodicTruth()
let periodicScenario = Scenario("periodic", summary: "bench workload", variants: [.starter], defaultIterations: 1) {
  context in
  context.step("periodic") { periodicTruth.value = PeriodicWorkload.run(cpuNanoseconds: 1_000_000_000) }
}

func profilePeriodic(dithered: Bool) -> PeriodicRun? {
  if dithered { unsetenv("PERFHARNESS_DITHER") } else { setenv("PERFHARNESS_DITHER", "0", 1) }
  defer { unsetenv("PERFHARNESS_DITHER") }
  let report = MainActor.assumeIsolated {
    ScenarioRunner(configuration: RecordingConfiguration(instruments: [.time])).run(
      periodicScenario, variant: .starter, iterations: 1)
  }
  guard let profile = report.timeProfile, profile.periodDithered == dithered else { return nil }
  // Totals: each function's clock reads (a system library, charged to it) are its time.
  let weights = PeriodicWorkload.functions.map { name in
    profile.topFunctions.first { $0.symbol.contains(".\(name)(") || $0.symbol.hasPrefix(name + "(") }?.totalWeight ?? 0
  }
  let total = weights.reduce(0, +)
  let truth = periodicTruth.value
  guard total > 0, truth.count == 3 else { return nil }
  let samples = profile.threads.max { $0.weightMilliseconds < $1.weightMilliseconds }?.sampleCount ?? 0
  return PeriodicRun(
    errors: (0..<3).map { weights[$0] / total * 100 - truth[$0] }, truth: truth, samples: samples,
    handlerMedian: profile.handlerMedianMicroseconds)
}

/// `perf record -F 999` on `bench-workload periodic 1`; nil when perf does not run here.
func perfPeriodic(_ perf: String, round: Int) throws -> PeriodicRun? {
  let data = FileManager.default.temporaryDirectory.appendingPathComponent("perfharness-periodic-\(round).data").path
  defer { try? FileManager.default.removeItem(atPath: data) }
  let workload = binDirectory.appendingPathComponent("bench-workload").path
  guard
    let printed = try runQuietly([
      perf, "record", "-F", "999", "-e", "cpu-clock:u", "-q", "-o", data, "--", workload, "periodic", "1",
    ]),
    let line = printed.split(separator: "\n").first(where: { $0.hasPrefix("periodic-truth: ") })
  else { return nil }
  let truth = line.dropFirst("periodic-truth: ".count).split(separator: " ").compactMap { Double($0) }
  // Self samples (the ~1 % in the clock reads, in libc and the vDSO, is left out, as in
  // the split row); perf shows the names mangled.
  guard truth.count == 3,
    let text = try runQuietly([perf, "report", "-i", data, "--stdio", "--no-children", "-n", "--sort", "symbol", "-q"])
  else { return nil }
  var counts: [Double] = [0, 0, 0]
  for line in text.split(separator: "\n") {
    // "  self%  samples  [.] symbol"
    let fields = line.split(separator: " ")
    guard fields.count >= 4, let count = Double(fields[1]) else { continue }
    for (i, name) in PeriodicWorkload.functions.enumerated() where line.contains("\(name.count)\(name)_") {
      counts[i] += count
    }
  }
  let total = counts.reduce(0, +)
  guard total > 0 else { return nil }
  return PeriodicRun(errors: (0..<3).map { counts[$0] / total * 100 - truth[$0] }, truth: truth, samples: Int(total))
}

/// The periodic rows: `rounds` rounds of the three, alternating.
func measurePeriodic(rounds: Int) throws -> [Figure] {
  var dithered: [PeriodicRun] = []
  var fixed: [PeriodicRun] = []
  var perfRuns: [PeriodicRun] = []
  let perf = tool("perf")
  for round in 0..<rounds {
    FileHandle.standardError.write(Data("bench: periodic round \(round + 1) of \(rounds)\n".utf8))
    if let run = profilePeriodic(dithered: true) { dithered.append(run) }
    if let run = profilePeriodic(dithered: false) { fixed.append(run) }
    if let perf, let run = try perfPeriodic(perf, round: round) { perfRuns.append(run) }
  }
  func describe(_ runs: [PeriodicRun]) -> String {
    guard !runs.isEmpty else { return "no runs" }
    let errors = runs.flatMap(\.errors)
    let z = runs.flatMap(\.z)
    let rms = (errors.map { $0 * $0 }.reduce(0, +) / Double(errors.count)).squareRoot()
    let rmsZ = (z.map { $0 * $0 }.reduce(0, +) / Double(z.count)).squareRoot()
    let means = (0..<3).map { i in runs.map { $0.errors[i] }.reduce(0, +) / Double(runs.count) }
    let samples = runs.map { Double($0.samples) }
    let handler = runs.compactMap(\.handlerMedian)
    return (handler.isEmpty ? "" : String(format: "handler median %.2f µs; ", median(handler)))
      + String(
        format:
          "%d runs, median %.0f samples: mean error per function %@ points, rms %.2f points (%.2f binomial SD), worst %.1f points (%.1f SD)",
        runs.count, median(samples), means.map { String(format: "%+.2f", $0) }.joined(separator: "/"), rms, rmsZ,
        errors.map(abs).max() ?? .nan, z.map(abs).max() ?? .nan)
  }
  func rmsZ(_ runs: [PeriodicRun]) -> Double {
    let z = runs.flatMap(\.z)
    return z.isEmpty ? .nan : (z.map { $0 * $0 }.reduce(0, +) / Double(z.count)).squareRoot()
  }
  let meanOK =
    (0..<3).allSatisfy { i in abs(dithered.map { $0.errors[i] }.reduce(0, +) / Double(max(dithered.count, 1))) <= 1 }
  let within = dithered.allSatisfy { $0.z.allSatisfy { abs($0) <= 3 } }
  let ratio = rmsZ(dithered)
  return [
    Figure(
      name: "Time Profiler on work in step with the 1 kHz period (rms error in binomial SD)", measured: ratio,
      unit: "x", target: "<= 1.2x, mean error <= 1 point, every run within 3 SD",
      meetsTarget: dithered.count == rounds ? ratio <= 1.2 && meanOK && within : nil,
      detail:
        "1 ms CPU units split 50/30/20, 1 s runs against each run's per-call thread-CPU truth, alternating in each round; dithered: \(describe(dithered)); fixed periods (the before): \(describe(fixed)); perf record -F 999: \(perf == nil || perfRuns.isEmpty ? "does not run here" : describe(perfRuns))"
    )
  ]
}
