import Foundation

// The floor under any CPU-time profiler's overhead on this machine: a fixed loop under a
// cpu-clock perf event at 4 kHz, without a signal (what perf record pays: the kernel writes
// the sample) and with one to an empty handler (what every signal-based profiler pays
// before its handler runs), against the plain loop. `bench-sampling-floor` runs the loops
// in a process of its own, its sources in rotating order.

struct SamplingFloor {
  /// Microseconds each overflow added to the loop: the event alone, and with its signal.
  var eventMicroseconds: Double
  var signalMicroseconds: Double
  var rounds: Int
  var samplesPerRun: Double
}

func measureSamplingFloor(rounds: Int) throws -> SamplingFloor? {
  let floorBinary = binDirectory.appendingPathComponent("bench-sampling-floor").path
  guard let output = try runQuietly([floorBinary, String(rounds)]) else { return nil }
  // round -> source -> (ms, samples)
  var runs: [Int: [String: (Double, Double)]] = [:]
  for line in output.split(separator: "\n") where line.hasPrefix("sampling-floor:") {
    var fields: [String: String] = [:]
    for pair in line.dropFirst("sampling-floor:".count).split(separator: " ") {
      let parts = pair.split(separator: "=", maxSplits: 1)
      if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
    }
    guard fields["error"] == "0", let round = fields["round"].flatMap(Int.init), let source = fields["source"],
      let ms = fields["ms"].flatMap(Double.init), let samples = fields["samples"].flatMap(Double.init)
    else { continue }
    runs[round, default: [:]][source] = (ms, samples)
  }
  // Each round's runs against its own plain run: the load drifts between rounds.
  func perSample(_ source: String) -> [Double] {
    runs.values.compactMap { round in
      guard let plain = round["none"], let sampled = round[source], sampled.1 > 0 else { return nil }
      return (sampled.0 - plain.0) * 1000 / sampled.1
    }
  }
  let event = perSample("event")
  let signal = perSample("signal")
  guard !event.isEmpty, !signal.isEmpty else { return nil }
  return SamplingFloor(
    eventMicroseconds: median(event), signalMicroseconds: median(signal), rounds: signal.count,
    samplesPerRun: median(runs.values.compactMap { $0["signal"]?.1 }))
}

func samplingFloorFigures(_ floor: SamplingFloor) -> [Figure] {
  let detail =
    "a fixed loop on one thread (~%.0f overflows per run at 4 kHz) against the plain loop, median of %d rounds; at 1 kHz that is %.2f %% of the sampled thread's time"
  return [
    Figure(
      name: "Sampling floor: a cpu-clock perf event's overflow, no signal (perf record's cost)",
      measured: floor.eventMicroseconds, unit: "µs per sample", target: "–", meetsTarget: nil,
      detail: String(format: detail, floor.samplesPerRun, floor.rounds, floor.eventMicroseconds / 10)),
    Figure(
      name: "Sampling floor: the same overflow signalled to an empty handler (any signal-based profiler)",
      measured: floor.signalMicroseconds, unit: "µs per sample", target: "–", meetsTarget: nil,
      detail: String(format: detail, floor.samplesPerRun, floor.rounds, floor.signalMicroseconds / 10)),
  ]
}
