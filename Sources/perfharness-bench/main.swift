// `make bench`: the overhead figures, measured in one run on this machine, against their
// targets. Prints a table, writes Reports/bench/bench.json and regenerates the README's
// performance section. Drives the release `perfharness` binary as a user would.
import Foundation
import PerfHarness

struct Figure: Codable {
  var name: String
  var measured: Double
  var unit: String
  var target: String
  var meetsTarget: Bool?
  var detail: String
}

func median(_ values: [Double]) -> Double {
  let sorted = values.sorted()
  guard !sorted.isEmpty else { return .nan }
  return sorted.count % 2 == 1
    ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

let binDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
let perfharness = binDirectory.appendingPathComponent("perfharness")
let output = URL(fileURLWithPath: "Reports/bench")
try FileManager.default.createDirectory(at: output, withIntermediateDirectories: true)
let rounds = Int(ProcessInfo.processInfo.environment["BENCH_ROUNDS"] ?? "") ?? 5

/// Runs the scenario and returns its report (the scenario's own wall time excludes process
/// start-up and symbolization).
func runScenario(_ name: String, variant: String, iterations: Int, instruments: String) throws -> Report {
  let process = Process()
  process.executableURL = perfharness
  process.arguments = [
    "scenario", name, "--variant", variant, "--iterations", String(iterations), "--instruments", instruments,
    "--format", "json", "--output", output.appendingPathComponent("runs").path,
  ]
  let pipe = Pipe()
  process.standardOutput = pipe
  try process.run()
  let data = pipe.fileHandleForReading.readDataToEndOfFile()
  process.waitUntilExit()
  guard process.terminationStatus == 0 else {
    throw BenchError("perfharness \(process.arguments!.joined(separator: " ")) exited \(process.terminationStatus)")
  }
  return try JSONDecoder().decode(Report.self, from: data)
}

struct BenchError: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}

var figures: [Figure] = []
FileHandle.standardError.write(Data("bench: Time Profiler overhead, \(rounds) alternating rounds\n".utf8))
var plain: [Double] = []
var profiled: [Double] = []
var handlerMedians: [Double] = []
var depths: [Double] = []
for _ in 0..<rounds {
  plain.append(
    try runScenario("filtered-thumbnail-scrolling", variant: "starter", iterations: 3, instruments: "none")
      .wallTimeMilliseconds)
  let report = try runScenario("filtered-thumbnail-scrolling", variant: "starter", iterations: 3, instruments: "time")
  profiled.append(report.wallTimeMilliseconds)
  if let profile = report.timeProfile {
    handlerMedians.append(profile.handlerMedianMicroseconds)
    depths.append(Double(profile.medianStackDepth))
  }
}
let overhead = (median(profiled) / median(plain) - 1) * 100
figures.append(
  Figure(
    name: "Time Profiler overhead at 1 kHz (filtered-thumbnail-scrolling, starter)", measured: overhead, unit: "%",
    target: "< 2 %", meetsTarget: overhead < 2,
    detail: String(
      format: "median wall %.1f ms profiled vs %.1f ms plain, %d rounds each", median(profiled), median(plain), rounds))
)
let handler = median(handlerMedians)
figures.append(
  Figure(
    name: "Time Profiler cost per sample, in the handler", measured: handler, unit: "µs", target: "< 2 µs",
    meetsTarget: handler < 2,
    detail: String(
      format: "median of the runs' medians; median stack %.0f frames; kernel signal delivery not included",
      median(depths))))

// The table.
func format(_ value: Double) -> String { String(format: value < 10 ? "%.2f" : "%.1f", value) }
var table = "| figure | measured | target | meets | detail |\n|---|---|---|---|---|\n"
for figure in figures {
  let meets = figure.meetsTarget.map { $0 ? "yes" : "**no**" } ?? "–"
  table +=
    "| \(figure.name) | \(format(figure.measured)) \(figure.unit) | \(figure.target) | \(meets) | \(figure.detail) |\n"
}
let environment = RunEnvironment.current()
let header =
  "Measured by `make bench` on \(environment.cpu) (\(environment.cpuCount) cores), \(environment.os), release build.\n\n"
print(header + table)

let encoder = JSONEncoder()
encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
try encoder.encode(figures).write(to: output.appendingPathComponent("bench.json"))
try Data((header + table).utf8).write(to: output.appendingPathComponent("performance.md"))

// Regenerate the README's performance section between its markers.
let readme = URL(fileURLWithPath: "README.md")
if var text = try? String(contentsOf: readme, encoding: .utf8),
  let start = text.range(of: "<!-- bench:start -->"), let end = text.range(of: "<!-- bench:end -->")
{
  text.replaceSubrange(start.upperBound..<end.lowerBound, with: "\n" + header + table)
  try Data(text.utf8).write(to: readme)
  FileHandle.standardError.write(Data("bench: README.md performance section updated\n".utf8))
}
