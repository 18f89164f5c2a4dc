import BenchWorkloads
import Foundation
import PerfBenchSupport
import PerfHarness
import PerfReports

// Report generation at scale: a real recording of about 1 M allocations and 100 k samples
// (wall clock at 10 kHz on four busy threads), then the time and peak memory from the end
// of the scenario's body to the finished report, and the JSON encoding of that report.

/// Distinct call paths for the sampled phase: `spin` recurses through a mix of four
/// functions chosen by the seed's digits, so samples land on many different stacks.
@inline(never) func spinA(_ depth: Int, _ seed: Int, until deadline: ContinuousClock.Instant) -> Int {
  spin(depth - 1, seed / 4, until: deadline) &+ 1
}
@inline(never) func spinB(_ depth: Int, _ seed: Int, until deadline: ContinuousClock.Instant) -> Int {
  spin(depth - 1, seed / 4, until: deadline) &+ 2
}
@inline(never) func spinC(_ depth: Int, _ seed: Int, until deadline: ContinuousClock.Instant) -> Int {
  spin(depth - 1, seed / 4, until: deadline) &+ 3
}
@inline(never) func spinD(_ depth: Int, _ seed: Int, until deadline: ContinuousClock.Instant) -> Int {
  spin(depth - 1, seed / 4, until: deadline) &+ 4
}
@inline(never) func spin(_ depth: Int, _ seed: Int, until deadline: ContinuousClock.Instant) -> Int {
  if depth == 0 {
    var total = 0
    for index in 0..<20_000 { total &+= index &* seed }
    return total
  }
  switch seed % 4 {
  case 0: return spinA(depth, seed, until: deadline)
  case 1: return spinB(depth, seed, until: deadline)
  case 2: return spinC(depth, seed, until: deadline)
  default: return spinD(depth, seed, until: deadline)
  }
}

/// When the scenario's body ended, and the resident set then: the report is built after it.
nonisolated(unsafe) var bodyEnded = ContinuousClock.now
nonisolated(unsafe) var residentAtBodyEnd = 0

/// VmHWM or VmRSS from /proc/self/status, in bytes.
func residentBytes(_ field: String) -> Int {
  guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
    let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") })
  else { return 0 }
  return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
}

let reportScaleScenario = Scenario(
  "report-at-scale", summary: "bench workload", variants: [.starter], defaultIterations: 1
) { context in
  var kept: [ChurnNode] = []
  context.step("allocate") { churn(depth: 25, operations: 1_000_000, kept: &kept) }
  context.markGeneration("allocated")
  context.step("spin") {
    let deadline = ContinuousClock.now + .milliseconds(4000)
    DispatchQueue.concurrentPerform(iterations: 4) { worker in
      var seed = worker
      while ContinuousClock.now < deadline {
        blackHole(spin(30, seed, until: deadline))
        seed = (seed &* 1_103_515_245 &+ 12345) & 0xFFFF
      }
    }
  }
  withExtendedLifetime(kept) {}
  // From here on the peak resident set is the report's: 5 resets VmHWM to the current RSS.
  try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
  residentAtBodyEnd = residentBytes("VmRSS")
  bodyEnded = .now
}

/// Report generation rows for `make bench`: median of `rounds` recordings. The HTML page of
/// each is opened in headless Chromium where it is installed, to time what a reader waits for.
func measureReportGeneration(rounds: Int, output: URL) throws -> (figures: [Figure], report: Report?) {
  var generation: [Double] = []
  var encoding: [Double] = []
  var peaks: [Double] = []
  var atEnd: [Double] = []
  var htmlTimes: [Double] = []
  var htmlPeaks: [Double] = []
  var htmlBefore: [Double] = []
  var htmlSizes: [Double] = []
  var opened: [Double] = []
  var samples: [Double] = []
  var allocations: [Double] = []
  var pprofTimes: [Double] = []
  var pprofBytes: [Double] = []
  var lastReport: Report?
  for _ in 0..<rounds {
    let configuration = RecordingConfiguration(
      instruments: [.time, .allocations], sampleRateHz: 10_000, clock: .wall, allocationStacks: true)
    let report = MainActor.assumeIsolated {
      ScenarioRunner(configuration: configuration).run(reportScaleScenario, variant: .starter, iterations: 1)
    }
    let built = ContinuousClock.now
    generation.append((built - bodyEnded).milliseconds)
    peaks.append(Double(residentBytes("VmHWM")))
    atEnd.append(Double(residentAtBodyEnd))
    let encodeStart = ContinuousClock.now
    _ = try ReportJSON.encode(report)
    encoding.append((ContinuousClock.now - encodeStart).milliseconds)

    try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    let residentBeforeHTML = residentBytes("VmRSS")
    let (html, timing) = try HTMLReport.timedRender(report)
    htmlTimes.append(timing.milliseconds)
    htmlSizes.append(Double(timing.bytes))
    htmlPeaks.append(Double(residentBytes("VmHWM")))
    htmlBefore.append(Double(residentBeforeHTML))
    let page = output.appendingPathComponent("report-at-scale.html")
    try Data(html.utf8).write(to: page)
    if let rendered = openInBrowser(page) { opened.append(rendered) }

    // The two pprof files a run writes beside its report (the CPU profile, and the heap by
    // allocation stack), gzipped.
    let pprofStart = ContinuousClock.now
    let cpu = report.timeProfile.map { Pprof.cpuProfile($0.profile) }
    let heap = report.allocations.flatMap(Pprof.heapProfile)
    pprofTimes.append((ContinuousClock.now - pprofStart).milliseconds)
    pprofBytes.append(Double((cpu?.count ?? 0) + (heap?.count ?? 0)))

    samples.append(Double(report.timeProfile?.sampleCount ?? 0))
    allocations.append(Double(report.allocations?.totals.totalAllocations ?? 0))
    lastReport = report
  }
  let scale = String(
    format: "%.0f k samples, %.2f M allocations (median of %d recordings)", median(samples) / 1000,
    median(allocations) / 1e6, rounds)
  let openTime = median(opened)
  // The CPU profile at the scale the issue names, on the synthetic report (100 k samples of 30
  // frames over many distinct stacks), whatever this machine's recording reached.
  let synthetic = try HTMLReport.syntheticReport(samples: 100_000, stackDepth: 30, allocations: 1_000_000)
  var syntheticTimes: [Double] = []
  var syntheticBytes = 0
  for _ in 0..<max(3, rounds) {
    let start = ContinuousClock.now
    syntheticBytes = synthetic.timeProfile.map { Pprof.cpuProfile($0.profile).count } ?? 0
    syntheticTimes.append((ContinuousClock.now - start).milliseconds)
  }
  return (
    [
      Figure(
        name: "Report generation: analysis, symbolization, call tree (after the scenario)",
        measured: median(generation), unit: "ms", target: "–", meetsTarget: nil,
        detail: scale
          + String(
            format: "; peak RSS while generating %.0f MiB (%.0f MiB when the scenario ended; freed heap is reused)",
            median(peaks) / 1_048_576, median(atEnd) / 1_048_576)),
      Figure(
        name: "Report generation: JSON encoding", measured: median(encoding), unit: "ms", target: "–",
        meetsTarget: nil, detail: scale),
      Figure(
        name: "Report generation: HTML page", measured: median(htmlTimes), unit: "ms", target: "–", meetsTarget: nil,
        detail: scale
          + String(
            format: "; %.1f MB page; peak RSS while rendering %.0f MiB (%.0f MiB before)", median(htmlSizes) / 1e6,
            median(htmlPeaks) / 1_048_576, median(htmlBefore) / 1_048_576)),
      Figure(
        name: "Report generation: pprof (profile.pb.gz and heap.pb.gz)", measured: median(pprofTimes), unit: "ms",
        target: "–", meetsTarget: nil,
        detail: scale + String(format: "; %.0f KiB gzipped", median(pprofBytes) / 1024)),
      Figure(
        name: "Report generation: pprof CPU profile of a synthetic 100 k-sample report",
        measured: median(syntheticTimes),
        unit: "ms", target: "–", meetsTarget: nil,
        detail: String(
          format: "100 k samples of 30 frames, 4000 functions; %.0f KiB gzipped; median of %d",
          Double(syntheticBytes) / 1024, syntheticTimes.count)),
      Figure(
        name: "HTML report: opened in headless Chromium until every section is drawn", measured: openTime, unit: "ms",
        target: "< 3000 ms", meetsTarget: opened.isEmpty ? nil : openTime < 3000,
        detail: opened.isEmpty
          ? "chromium is not installed (make test installs it)"
          : "the page's own timing from navigation start, median of \(opened.count); " + scale),
    ], lastReport
  )
}

/// Milliseconds from navigation start until the page drew its last section; nil when
/// Chromium is missing, fails or takes over two minutes.
func openInBrowser(_ page: URL) -> Double? {
  guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium") else { return nil }
  let profile = FileManager.default.temporaryDirectory.appendingPathComponent("perfharness-bench-chromium-\(UUID())")
  defer { try? FileManager.default.removeItem(at: profile) }
  let dom = FileManager.default.temporaryDirectory.appendingPathComponent("perfharness-bench-dom-\(UUID()).html")
  defer { try? FileManager.default.removeItem(at: dom) }
  _ = FileManager.default.createFile(atPath: dom.path, contents: nil)
  var command = HTMLReport.browserTimingCommand(page: page.path, userDataDirectory: profile.path)
  command[0] = "/usr/bin/chromium"
  let process = Process()
  process.executableURL = URL(fileURLWithPath: command[0])
  process.arguments = Array(command.dropFirst())
  guard let handle = try? FileHandle(forWritingTo: dom) else { return nil }
  process.standardOutput = handle
  process.standardError = FileHandle.nullDevice
  guard (try? process.run()) != nil else { return nil }
  let deadline = Date(timeIntervalSinceNow: 120)
  while process.isRunning && Date() < deadline { usleep(50_000) }
  if process.isRunning {
    process.terminate()
    return nil
  }
  guard let text = try? String(contentsOf: dom, encoding: .utf8) else { return nil }
  return HTMLReport.browserTiming(fromDOM: text)?.renderedMilliseconds
}
