import Foundation
import PerfHarness
import PerfReports

extension HTMLReport {
  /// What rendering one report to HTML cost, for `make bench`.
  public struct RenderTiming: Sendable {
    /// Encoding the report's JSON and filling the page template.
    public var milliseconds: Double
    /// Size of the page in bytes (UTF-8).
    public var bytes: Int
  }

  /// Renders `report` and measures how long that took.
  public static func timedRender(_ report: Report) throws -> (html: String, timing: RenderTiming) {
    let clock = ContinuousClock()
    let start = clock.now
    let html = try render(report)
    return (html, RenderTiming(milliseconds: start.duration(to: clock.now).milliseconds, bytes: html.utf8.count))
  }

  /// The headless Chromium command that opens `page` and prints its DOM once the page has
  /// drawn itself; the page records its own time in the root element's `data-rendered-ms`
  /// attribute and shows it as "rendered in N ms" (read both with ``browserTiming(fromDOM:)``).
  /// Run it with a timeout: a browser can hang. From a shell:
  ///
  ///     timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir=$(mktemp -d) \
  ///       --dump-dom file://$PWD/report.html | grep -o 'rendered in [0-9]* ms'
  public static func browserTimingCommand(page: String, userDataDirectory: String) -> [String] {
    [
      "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=\(userDataDirectory)",
      "--dump-dom", URL(fileURLWithPath: page).absoluteString,
    ]
  }

  /// What the page measured about itself, in milliseconds since navigation start.
  public struct BrowserTiming: Sendable, Equatable {
    /// HTML parsed and the report's JSON decoded.
    public var parsedMilliseconds: Double
    /// The call tree and flame graph drawn.
    public var treeMilliseconds: Double
    /// Every section drawn.
    public var renderedMilliseconds: Double

    public init(parsedMilliseconds: Double, treeMilliseconds: Double, renderedMilliseconds: Double) {
      self.parsedMilliseconds = parsedMilliseconds
      self.treeMilliseconds = treeMilliseconds
      self.renderedMilliseconds = renderedMilliseconds
    }
  }

  /// Reads the timing a page recorded from the DOM that ``browserTimingCommand(page:userDataDirectory:)``
  /// printed (`data-parsed-ms`, `data-tree-ms`, `data-rendered-ms` on the root element); nil when
  /// the page did not get that far.
  public static func browserTiming(fromDOM dom: String) -> BrowserTiming? {
    func value(_ attribute: String) -> Double? {
      guard let start = dom.range(of: "\(attribute)=\""),
        let end = dom[start.upperBound...].firstIndex(of: "\"")
      else { return nil }
      return Double(dom[start.upperBound..<end])
    }
    guard let parsed = value("data-parsed-ms"), let tree = value("data-tree-ms"),
      let rendered = value("data-rendered-ms")
    else { return nil }
    return BrowserTiming(parsedMilliseconds: parsed, treeMilliseconds: tree, renderedMilliseconds: rendered)
  }

  /// A report shaped like a large run, for measuring the renderer and the page: `samples`
  /// samples of `stackDepth` frames over many distinct stacks (a skewed random walk over a few
  /// thousand functions on four threads), and allocations summarised from `allocations` blocks
  /// (thousands of categories, a long live-heap timeline, generations with stacks, leak cycles).
  /// Deterministic: the same arguments give the same report.
  public static func syntheticReport(samples: Int = 100_000, stackDepth: Int = 30, allocations: Int = 1_000_000)
    throws -> Report
  {
    var random = SplitMix(seed: 0x5EED)
    let functionCount = 4000
    let frames = (0..<functionCount).map { index in
      let isApp = index % 5 < 3
      return ProfileFrame(
        name: isApp ? "App.Module\(index % 40).function\(index)(_:)" : "system_function_\(index)",
        module: isApp ? "App" : (index % 2 == 0 ? "libswiftCore.so" : "libc.so.6"), isApp: isApp,
        file: isApp ? "/src/App/File\(index % 40).swift" : nil, line: isApp ? index % 300 + 1 : nil)
    }
    var threads = [ProfileThread(name: "Main Thread", isMain: true, threadID: 100)]
    for index in 1..<4 {
      threads.append(ProfileThread(name: "worker \(index)", isMain: false, threadID: Int32(100 + index)))
    }
    var profileSamples: [ProfileSample] = []
    profileSamples.reserveCapacity(samples)
    for index in 0..<samples {
      var stack = [0, 1, 2]
      var function = 2
      while stack.count < stackDepth {
        // Mostly the heaviest callee, sometimes another: heavy paths and a long tail.
        let roll = random.next() % 100
        var choice = 0
        if roll >= 85 {
          choice = 2 + Int(random.next() % 6)
        } else if roll >= 60 {
          choice = 1
        }
        let mixed: Int = function &* 7919 &+ choice &* 104_729 &+ stack.count
        function = 3 + mixed % (functionCount - 3)
        stack.append(function)
      }
      let thread = index % 10 < 7 ? 0 : 1 + index % 3
      profileSamples.append(
        ProfileSample(thread: thread, weight: 1 + Double(random.next() % 3), stack: stack, timestamp: Double(index)))
    }
    let durationMilliseconds = Double(samples)

    let categoryCount = max(10, min(5000, allocations / 200))
    var categories: [String] = []
    for index in 0..<categoryCount {
      let total = allocations / categoryCount
      let persistent = Int(random.next() % UInt64(max(1, total / 4)))
      let size = 16 << (index % 10)
      categories.append(
        #"{"name":"App.Type\#(index)","kind":"swiftClass","persistentCount":\#(persistent),"#
          + #""transientCount":\#(total - persistent),"totalCount":\#(total),"#
          + #""persistentBytes":\#(persistent * size),"totalBytes":\#(total * size)}"#)
    }
    let timelineCount = max(2, min(50_000, allocations / 20))
    var live = 0
    var timeline: [String] = []
    for index in 0..<timelineCount {
      live = max(0, live + Int(random.next() % 4096) - 1900)
      timeline.append(
        #"{"timeMilliseconds":\#(Double(index) * durationMilliseconds / Double(timelineCount)),"liveBytes":\#(live)}"#)
    }
    let stackJSON =
      "["
      + (0..<stackDepth).map { depth in
        let frame = frames[(depth * 131) % functionCount]
        return #"{"symbol":"\#(frame.name)","module":"\#(frame.module)","isApp":\#(frame.isApp)}"#
      }.joined(separator: ",") + "]"
    let marks = (0..<10).map { index in
      #"{"index":\#(index),"label":"Mark \#(index)","timeMilliseconds":\#(Double(index + 1) * durationMilliseconds / 11),"#
        + #""isMemoryWarning":\#(index == 7)}"#
    }
    let generations = (0...10).map { index in
      let growth = (0..<10).map { category in
        #"{"name":"App.Type\#(category)","growthBytes":\#(4096 * (10 - category)),"growthCount":\#(10 - category),"#
          + #""allocationStack":\#(stackJSON)}"#
      }
      return #"{"index":\#(index),"label":"\#(index == 0 ? "Start" : "Mark \(index - 1)")","#
        + #""startMilliseconds":\#(Double(index) * durationMilliseconds / 11),"#
        + #""endMilliseconds":\#(Double(index + 1) * durationMilliseconds / 11),"growthBytes":\#(40960 * index),"#
        + #""growthCount":\#(10 * index),"liveBytes":\#(live / 11 * index),"categories":[\#(growth.joined(separator: ","))]}"#
    }
    let cycleNode = #"{"type":"App.Controller","bytes":64,"allocationStack":\#(stackJSON)}"#
    let closureNode = #"{"type":"closure context","bytes":32,"allocationStack":\#(stackJSON)}"#
    let cycle =
      #"{"nodes":[\#(cycleNode),\#(closureNode)],"edges":[{"from":0,"to":1,"offset":16,"name":"handler","kind":"strong"},"#
      + #"{"from":1,"to":0,"offset":16,"name":"capture #0","kind":"strong"}],"instances":3,"#
      + #""neighbors":[\#(cycleNode)],"neighborEdges":[{"from":0,"to":2,"offset":24,"name":"child","kind":"strong"}]}"#
    let rootLeaks = (0..<200).map { index in
      #"{"type":"Malloc \#(16 << (index % 8)) Bytes","bytes":\#(16 << (index % 8)),"count":1,"allocationStack":\#(stackJSON)}"#
    }
    let json = """
      {"schemaVersion":1,"tool":{"name":"perfharness","version":"\(PerfHarnessVersion.current)"},
      "environment":{"swiftVersion":"6.3","os":"synthetic","cpu":"synthetic","cpuCount":2,"buildConfiguration":"release"},
      "scenario":{"name":"synthetic","variant":"large","iterations":1,"instruments":["time","allocations","leaks"]},
      "status":"passed","wallTimeMilliseconds":\(durationMilliseconds),
      "steps":[{"name":"work","count":1,"totalMilliseconds":1,"medianMilliseconds":1,"maxMilliseconds":1}],
      "marks":[\(marks.joined(separator: ","))],
      "checks":[{"name":"max-growth","limit":1048576,"actual":409600,"passed":true,"detail":"generation Mark 9"}],
      "timeProfile":{"clock":"cpu","sampleRateHz":1000,"sampleCount":\(samples),"lostSamples":0,
      "signalsReceived":\(samples),"totalWeightMilliseconds":\(durationMilliseconds),
      "durationMilliseconds":\(durationMilliseconds),"handlerMedianMicroseconds":1,"handlerP90Microseconds":2,
      "medianStackDepth":\(stackDepth),"symbolizationMilliseconds":1,"uniqueAddresses":\(functionCount),
      "threads":[],"topFunctions":[],
      "profile":{"frames":[],"threads":[],"samples":[],"sampleIntervalMilliseconds":1}},
      "allocations":{"mode":"fullStacks","durationMilliseconds":\(durationMilliseconds),
      "totals":{"totalAllocations":\(allocations),"totalBytes":\(allocations * 64),"persistentCount":\(allocations / 10),
      "persistentBytes":\(allocations * 6),"transientCount":\(allocations - allocations / 10),
      "transientBytes":\(allocations * 58),"peakLiveBytes":\(live * 2),"liveBytesAtEnd":\(live)},
      "categories":[\(categories.joined(separator: ","))],
      "generations":[\(generations.joined(separator: ","))],
      "timeline":[\(timeline.joined(separator: ","))],
      "lost":{"blocks":0,"stacks":0,"freedCategories":0,"timelinePoints":0},
      "overhead":{"blockTableBytes":0,"stackTableBytes":0,"bytesPerLiveBlock":0}},
      "leaks":{"leakedCount":206,"leakedBytes":20000,"rootLeaks":[\(rootLeaks.joined(separator: ","))],
      "indirectLeakCount":0,"indirectLeakBytes":0,"indirectLeaks":[],"cycles":[\(cycle)],"unscannedThreads":0,
      "threadsScanned":4,"scanMilliseconds":1,"analysisMilliseconds":1,"blocksScanned":\(allocations / 10),
      "edgeCount":\(allocations / 5),"suppressedCount":0,"suppressedBytes":0}}
      """
    var report = try ReportJSON.decode(Data(json.utf8))
    report.timeProfile?.profile = Profile(
      frames: frames, threads: threads, samples: profileSamples, sampleIntervalMilliseconds: 1)
    return report
  }
}

extension HTMLReport {
  /// The pretty JSON of a ``syntheticReport(samples:stackDepth:allocations:)`` of about
  /// `bytes` (as `report.json` is written): its samples scaled to reach the size.
  public static func syntheticReportJSON(bytes: Int) throws -> Data {
    let probe = try ReportJSON.encode(syntheticReport(samples: 1000, allocations: 100_000)).count
    let empty = try ReportJSON.encode(syntheticReport(samples: 1, allocations: 100_000)).count
    let samples = max(1, (bytes - empty) * 999 / max(1, probe - empty))
    return try ReportJSON.encode(syntheticReport(samples: samples, allocations: 100_000))
  }
}

/// A small deterministic generator (SplitMix64): the synthetic report must not change between
/// runs, or bench figures would not compare.
private struct SplitMix {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
