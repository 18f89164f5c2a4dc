import Foundation
import PerfBenchSupport
import Testing

@testable import PerfHarness
@testable import PerfReports

/// A small two-thread profile: `main` calls `search` which spends time in itself, in
/// `filter(_:)` and in libc's `memcpy`; a worker runs `decode` through libdispatch.
private func smallProfile() -> Profile {
  let frames = [
    ProfileFrame(name: "main", module: "App", isApp: true, file: "main.swift", line: 1),
    ProfileFrame(name: "search(for:)", module: "App", isApp: true, file: "Search.swift", line: 10),
    ProfileFrame(name: "filter(_:)", module: "App", isApp: true, file: "Filter.swift", line: 20),
    ProfileFrame(name: "memcpy", module: "libc.so.6", isApp: false),
    ProfileFrame(name: "start_thread", module: "libc.so.6", isApp: false),
    ProfileFrame(name: "_dispatch_worker_thread", module: "libdispatch.so", isApp: false),
    ProfileFrame(name: "decode;v2", module: "App", isApp: true, file: "Decode.swift", line: 5),
    ProfileFrame(name: "search(for:)", module: "App", isApp: true, file: "Search.swift", line: 12),
  ]
  let samples = [
    ProfileSample(thread: 0, weight: 10, stack: [0, 1, 2], timestamp: 0),
    ProfileSample(thread: 0, weight: 5, stack: [0, 7, 2, 3], timestamp: 10),
    ProfileSample(thread: 0, weight: 3, stack: [0, 1], timestamp: 15),
    ProfileSample(thread: 1, weight: 2, stack: [4, 5, 6], timestamp: 1),
    ProfileSample(thread: 1, weight: 0.25, stack: [4, 5], timestamp: 3),
    ProfileSample(thread: 0, weight: 2, stack: [0, 1, 2], timestamp: 18),
  ]
  return Profile(
    frames: frames,
    threads: [
      ProfileThread(name: "Main Thread", isMain: true, threadID: 100),
      ProfileThread(name: "Worker", isMain: false, threadID: 101),
    ],
    samples: samples)
}

@Suite struct FoldedStacksTests {
  @Test func rendersOneSortedLinePerStackInMilliseconds() {
    #expect(
      FoldedStacks.render(smallProfile()) == """
        main;search(for:) 3
        main;search(for:);filter(_:) 12
        main;search(for:);filter(_:);memcpy 5
        start_thread;_dispatch_worker_thread 1
        start_thread;_dispatch_worker_thread;decode,v2 2

        """)
  }

  @Test func honoursThreadsAndHiddenSystemLibraries() {
    let options = CallTreeOptions(separateByThread: true, hideSystemLibraries: true)
    #expect(
      FoldedStacks.render(smallProfile(), options: options) == """
        Main Thread;main;search(for:) 3
        Main Thread;main;search(for:);filter(_:) 17
        Worker;<system libraries> 1
        Worker;decode,v2 2

        """)
  }

  @Test func countsSamplesWhenAsked() {
    #expect(
      FoldedStacks.render(smallProfile(), options: .init(invert: true, hideSystemLibraries: true), count: .samples)
        == """
        <system libraries> 1
        decode,v2 1
        filter(_:);search(for:);main 3
        search(for:);main 1

        """)
  }

  @Test func zeroWeightStacksAreNotEmitted() {
    var profile = smallProfile()
    profile.samples = [
      ProfileSample(thread: 0, weight: 0, stack: [0]), ProfileSample(thread: 0, weight: 0.2, stack: [0, 1]),
    ]
    #expect(FoldedStacks.render(profile) == "main;search(for:) 1\n")
  }

  @Test(arguments: [
    ("a;b", "a,b"), ("line\nbreak", "line break"), ("closure #1 in f(a:)", "closure #1 in f(a:)"), ("", "<unnamed>"),
  ])
  func escapesDelimiters(name: String, expected: String) {
    #expect(FoldedStacks.escape(name) == expected)
  }
}

@Suite struct SpeedscopeTests {
  @Test func writesOneSampledProfilePerThread() throws {
    let profile = smallProfile()
    let data = try Speedscope.render(profile, name: "search")
    let file = try JSONDecoder().decode(Speedscope.FileFormat.self, from: data)
    #expect(file.schema == "https://www.speedscope.app/file-format-schema.json")
    #expect(file.exporter == "perfharness")
    #expect(file.name == "search")
    #expect(file.activeProfileIndex == 0)
    #expect(file.profiles.map(\.name) == ["Main Thread", "Worker"])
    #expect(file.profiles.allSatisfy { $0.type == "sampled" && $0.unit == "milliseconds" })
    #expect(file.profiles.map(\.samples.count) == [4, 2])
    #expect(file.profiles.allSatisfy { $0.samples.count == $0.weights.count })
    #expect(file.profiles.flatMap(\.samples).flatMap { $0 }.allSatisfy { file.shared.frames.indices.contains($0) })
    #expect(file.profiles.reduce(0) { $0 + $1.weights.reduce(0, +) } == profile.totalWeight())
    // Functions, not frames: the two lines of search(for:) share a frame.
    #expect(file.shared.frames.count == 7)
    #expect(file.profiles[0].samples[0] == file.profiles[0].samples[1].dropLast())
    #expect(
      file.shared.frames[file.profiles[0].samples[0][1]] == .init(name: "search(for:)", file: "Search.swift", line: 10))
    #expect(file.shared.frames.contains(.init(name: "memcpy", file: "libc.so.6", line: nil)))
    #expect(file.profiles[0].startValue == 0)
    #expect(file.profiles[0].endValue == 20)
    #expect(file.profiles[1].startValue == 1)
    #expect(file.profiles[1].endValue == 3.25)
  }

  @Test func usesTheSchemaKeyNames() throws {
    let json = try JSONSerialization.jsonObject(with: Speedscope.render(smallProfile(), name: "x")) as? [String: Any]
    #expect(
      Set(json?.keys.map { $0 } ?? []) == ["$schema", "shared", "profiles", "name", "activeProfileIndex", "exporter"])
    let first = (json?["profiles"] as? [[String: Any]])?.first
    #expect(
      Set(first?.keys.map { $0 } ?? []) == ["type", "name", "unit", "startValue", "endValue", "samples", "weights"])
  }

  @Test func escapesNamesAndKeepsFractionalWeights() throws {
    var profile = smallProfile()
    profile.frames[0].name = "say(\"hi\\there\")\n\u{1}é"
    let file = try JSONDecoder().decode(Speedscope.FileFormat.self, from: Speedscope.render(profile, name: "q\""))
    #expect(file.shared.frames[0].name == profile.frames[0].name)
    #expect(file.name == "q\"")
    #expect(file.profiles[1].weights == [2, 0.25])
  }

  @Test func ordersByTimestampAndActivatesTheMainThread() throws {
    var profile = smallProfile()
    profile.threads[0].isMain = false
    profile.threads[1].isMain = true
    profile.samples.swapAt(0, 5)
    let file = try JSONDecoder().decode(Speedscope.FileFormat.self, from: Speedscope.render(profile, name: "x"))
    #expect(file.activeProfileIndex == 1)
    #expect(file.profiles[0].weights == [10, 5, 3, 2])
  }
}

@Suite struct CallTreeTextTests {
  @Test func rendersAnIndentedTree() {
    let tree = CallTree(profile: smallProfile(), options: .init())
    let expected = """
      Call Tree: 22.3 ms in 6 samples
                   Weight         Self  Symbol
          20.0 ms   89.9%       0.0 ms  main [App]
          20.0 ms   89.9%       3.0 ms    search(for:) [App]
          17.0 ms   76.4%      12.0 ms      filter(_:) [App]
           5.0 ms   22.5%       5.0 ms        memcpy [libc.so.6]
           2.3 ms   10.1%       0.0 ms  start_thread [libc.so.6]
           2.3 ms   10.1%       0.3 ms    _dispatch_worker_thread [libdispatch.so]
           2.0 ms    9.0%       2.0 ms      decode;v2 [App]

      """
    #expect(CallTreeText.render(tree) == expected)
  }

  @Test func foldsSmallRowsAndCutsDepth() {
    let tree = CallTree(profile: smallProfile(), options: .init(separateByThread: true, invert: true))
    // topN counts roots too, so the Worker thread folds; minPercent folds its 1.1% row.
    let expected = """
      Call Tree (separate by thread, inverted): 22.3 ms in 6 samples
                   Weight         Self  Symbol
          20.0 ms   89.9%       0.0 ms  Main Thread
          12.0 ms   53.9%      12.0 ms    filter(_:) [App]
          12.0 ms   53.9%       0.0 ms      search(for:) [App] …
           8.0 ms   36.0%                 … 2 more
           2.3 ms   10.1%               … 1 more

      """
    #expect(CallTreeText.render(tree, maxDepth: 3, minPercent: 5, topN: 1) == expected)
    let unlimited = CallTreeText.render(tree, maxDepth: 3, minPercent: 5)
    #expect(unlimited.contains("\n     2.3 ms   10.1%       0.0 ms  Worker\n"))
    #expect(unlimited.hasSuffix("\n     0.3 ms    1.1%                 … 1 more\n"))
  }

  @Test func rendersTopFunctions() {
    let functions = smallProfile().topFunctions(hideSystemLibraries: true)
    let expected = """
                     Self                Total  Symbol
          17.0 ms   76.4%      17.0 ms   76.4%  filter(_:) [App]
           3.0 ms   13.5%      20.0 ms   89.9%  search(for:) [App]
                                                … 3 more

      """
    #expect(CallTreeText.renderTopFunctions(functions, limit: 2) == expected)
  }

  static let everyOption: [CallTreeOptions] = (0..<32).map { bits in
    CallTreeOptions(
      separateByThread: bits & 1 != 0, invert: bits & 2 != 0, hideSystemLibraries: bits & 4 != 0,
      flattenRecursion: bits & 8 != 0, topFunctions: bits & 16 != 0)
  }

  /// A tree built only as deep and as heavy as a view shows prints as the whole tree does,
  /// under every option: on random-walk stacks most rows are light and deep, and the pruned
  /// build leaves them out (a 222 MB report's summary held 1.2 GB of rows before).
  static let randomWalks = try? HTMLReport.syntheticReport(samples: 1_000, stackDepth: 16, allocations: 1_000)
    .timeProfile?.profile

  @Test(arguments: everyOption)
  func aPrunedTreePrintsAsTheWholeTree(options: CallTreeOptions) throws {
    let profile = try #require(Self.randomWalks)
    let whole = CallTree(profile: profile, options: options)
    let cuts: [(depth: Int, percent: Double, top: Int?)] = [
      (12, 0.5, nil), (4, 5.0, 3), (1, 1.0, nil), (30, 0.0, nil), (6, 2.0, 1),
    ]
    for (depth, percent, top) in cuts {
      let pruned = CallTree(
        profile: profile, options: options, pruning: CallTreePruning(minimumFraction: percent / 100, maxDepth: depth))
      #expect(
        CallTreeText.render(pruned, maxDepth: depth, minPercent: percent, topN: top)
          == CallTreeText.render(whole, maxDepth: depth, minPercent: percent, topN: top),
        "depth \(depth), \(percent)%, top \(top ?? 0)")
      if percent > 0 && depth < 16 {
        #expect(Self.rows(pruned.roots) < Self.rows(whole.roots), "nothing was left out")
      }
    }
  }

  static func rows(_ nodes: [CallTreeNode]) -> Int {
    var count = 0
    var work = nodes
    while let node = work.popLast() {
      count += 1
      work += node.children
    }
    return count
  }
}

/// The pprof export, read back by protoc (Debian's protobuf-compiler, which `make test`
/// installs) against the fields of pprof's `profile.proto` that the export writes, written
/// out here from the format's documentation.
@Suite struct PprofTests {
  static let schema = """
    syntax = "proto3";
    package check;
    message Profile {
      repeated ValueType sample_type = 1;
      repeated Sample sample = 2;
      repeated Location location = 4;
      repeated Function function = 5;
      repeated string string_table = 6;
      int64 duration_nanos = 10;
      ValueType period_type = 11;
      int64 period = 12;
      int64 default_sample_type = 14;
    }
    message ValueType { int64 type = 1; int64 unit = 2; }
    message Sample { repeated uint64 location_id = 1; repeated int64 value = 2; repeated Label label = 3; }
    message Label { int64 key = 1; int64 str = 2; int64 num = 3; }
    message Location { uint64 id = 1; repeated Line line = 4; }
    message Line { uint64 function_id = 1; int64 line = 2; }
    message Function { uint64 id = 1; int64 name = 2; int64 system_name = 3; int64 filename = 4; }
    """

  /// `gzip -dc | protoc --decode=check.Profile`: the text format of the decoded message.
  static func decode(_ gzipped: Data) throws -> String {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("pprof-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: folder) }
    try gzipped.write(to: folder.appendingPathComponent("profile.pb.gz"))
    try schema.write(to: folder.appendingPathComponent("check.proto"), atomically: true, encoding: .utf8)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.currentDirectoryURL = folder
    process.arguments = ["-c", "gzip -dc profile.pb.gz | protoc --decode=check.Profile check.proto"]
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    #expect(process.terminationStatus == 0, "gzip or protoc failed: is protobuf-compiler installed (make test does)?")
    return text
  }

  @Test("samples, cpu nanoseconds, threads, functions with files and lines, read back by protoc")
  func readsBack() throws {
    var profile = smallProfile()
    profile.samples[0].count = 4
    let text = try Self.decode(Pprof.cpuProfile(profile))
    let strings = text.split(separator: "\n").filter { $0.hasPrefix("string_table:") }.map {
      String($0.dropFirst("string_table: \"".count).dropLast())
    }
    #expect(strings.first == "")
    for name in ["samples", "count", "cpu", "nanoseconds", "thread", "thread_id", "Main Thread", "Worker", "memcpy"] {
      #expect(strings.contains(name), "\(name) in \(strings)")
    }
    // One sample message per sample: its locations leaf first (numbered in order of first
    // use), its count and its weight in ns.
    #expect(text.components(separatedBy: "\nsample {").count - 1 == profile.samples.count)
    #expect(
      text.contains("location_id: 1\n  location_id: 2\n  location_id: 3\n  value: 4\n  value: 10000000\n"), "\(text)")
    #expect(text.contains("value: 250000\n"))
    #expect(text.components(separatedBy: "\nlocation {").count - 1 == profile.frames.count)
    // search(for:) at two lines is one function with two locations.
    #expect(text.components(separatedBy: "\nfunction {").count - 1 == profile.frames.count - 1)
    #expect(text.contains("line: 12"))
    #expect(text.contains("period: 1000000"))
    #expect(text.contains("duration_nanos: \(Int(profile.totalWeight() * 1e6))"))
  }

  @Test("an inlined function is a line of its caller's location, innermost first")
  func inlinedFramesAreLinesOfOneLocation() throws {
    let profile = Profile(
      frames: [
        ProfileFrame(name: "App.main()", module: "App", isApp: true, file: "/src/main.swift", line: 3),
        ProfileFrame(name: "App.filter(_:)", module: "App", isApp: true, file: "/src/Filter.swift", line: 20),
        ProfileFrame(
          name: "App.clamp(_:)", module: "App", isApp: true, file: "/src/Filter.swift", line: 7, isInlined: true),
      ],
      threads: [ProfileThread(name: "Main Thread", isMain: true, threadID: 1)],
      samples: [
        ProfileSample(thread: 0, weight: 1, stack: [0, 1, 2]), ProfileSample(thread: 0, weight: 1, stack: [0, 1]),
      ])
    let text = try Self.decode(Pprof.cpuProfile(profile))
    // Two machine frames: filter with clamp inlined into it (one location, two lines), and main.
    let locations = text.components(separatedBy: "\nlocation {").dropFirst()
    #expect(locations.count == 3, "clamp+filter, main, filter alone: \(text)")
    #expect(text.contains("location_id: 1\n  location_id: 2\n  value: 1"), "\(text)")
    let inlined = try #require(locations.first)
    #expect(inlined.components(separatedBy: "line {").count - 1 == 2, "\(inlined)")
    #expect(inlined.contains("line: 7") && inlined.contains("line: 20"))
    #expect(inlined.range(of: "line: 7")!.lowerBound < inlined.range(of: "line: 20")!.lowerBound, "innermost first")
  }

  @Test("gzip: stored blocks over 64 KiB and an empty payload read back whole")
  func gzip() throws {
    let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gzip-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: folder) }
    for size in [0, 1, 65535, 65536, 200_000] {
      let payload = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
      let file = folder.appendingPathComponent("\(size).gz")
      try Gzip.stored(payload).write(to: file)
      let process = Process()
      process.executableURL = URL(fileURLWithPath: "/bin/sh")
      process.arguments = ["-c", "gzip -dc '\(file.path)'"]
      let output = Pipe()
      process.standardOutput = output
      try process.run()
      let read = output.fileHandleForReading.readDataToEndOfFile()
      process.waitUntilExit()
      #expect(process.terminationStatus == 0 && read == payload, "\(size) bytes")
    }
  }
}

/// What was live at the end by allocation stack: folded for flame graphs, pprof for heap
/// viewers.
@Suite struct AllocationStackExportTests {
  static func allocations() -> AllocationsReport {
    let frames = [
      AllocationsReport.StackFrame(symbol: "malloc", module: "CPerfAlloc", isApp: false),
      AllocationsReport.StackFrame(
        symbol: "App.Cache.store(_:)", module: "App", file: "Cache.swift", line: 12, isApp: true),
      AllocationsReport.StackFrame(symbol: "App.main()", module: "App", file: "main.swift", line: 3, isApp: true),
      AllocationsReport.StackFrame(
        symbol: "App.Cache.store(_:)", module: "App", file: "Cache.swift", line: 14, isApp: true),
    ]
    return AllocationsReport(
      mode: "fullStacks", durationMilliseconds: 1,
      totals: .init(
        totalAllocations: 5, totalBytes: 700, persistentCount: 5, persistentBytes: 700, transientCount: 0,
        transientBytes: 0, peakLiveBytes: 700, liveBytesAtEnd: 700),
      categories: [], generations: [], timeline: [],
      lost: .init(blocks: 0, stacks: 0, freedCategories: 0, timelinePoints: 0),
      overhead: .init(blockTableBytes: 0, stackTableBytes: 0, bytesPerLiveBlock: 0),
      persistentStacks: [
        .init(count: 3, bytes: 600, category: "App.Entry", frames: [0, 1, 2]),
        .init(count: 2, bytes: 100, category: "Malloc 64 Bytes", frames: [0, 3, 2]),
      ],
      stackFrames: frames)
  }

  @Test func foldedRootFirstWithTheCategoryLast() {
    #expect(
      AllocationsFolded.render(Self.allocations()) == """
        App.main();App.Cache.store(_:);malloc;[App.Entry] 600
        App.main();App.Cache.store(_:);malloc;[Malloc 64 Bytes] 100

        """)
    #expect(
      AllocationsFolded.render(Self.allocations(), hideSystemLibraries: true) == """
        App.main();App.Cache.store(_:);[App.Entry] 600
        App.main();App.Cache.store(_:);[Malloc 64 Bytes] 100

        """)
  }

  @Test("heap.pb.gz: inuse objects and bytes per stack, read back by protoc")
  func heapProfileReadsBack() throws {
    let gzipped = try #require(Pprof.heapProfile(Self.allocations()))
    let text = try PprofTests.decode(gzipped)
    for name in ["inuse_objects", "inuse_space", "bytes", "App.Cache.store(_:)", "Cache.swift", "App.Entry"] {
      #expect(text.contains("string_table: \"\(name)\""), "\(name)")
    }
    #expect(text.contains("location_id: 1\n  location_id: 2\n  location_id: 3\n  value: 3\n  value: 600\n"), "\(text)")
    #expect(text.contains("location_id: 1\n  location_id: 4\n  location_id: 3\n  value: 2\n  value: 100\n"))
    // Two lines of one function are two locations of one function.
    #expect(text.components(separatedBy: "\nlocation {").count - 1 == 4)
    #expect(text.components(separatedBy: "\nfunction {").count - 1 == 3)
    #expect(Pprof.heapProfile(AllocationStackExportTests.withoutStacks()) == nil)
  }

  @Test("heap.pb.gz with totals: alloc_objects, alloc_space, inuse_objects, inuse_space per stack, in Go's order")
  func heapProfileWithTotals() throws {
    var allocations = Self.allocations()
    // The first stack allocated 10 blocks and kept 3; a third one kept nothing.
    allocations.totalStacks = [
      .init(count: 10, bytes: 2000, frames: [0, 1, 2]), .init(count: 2, bytes: 100, frames: [0, 3, 2]),
      .init(count: 7, bytes: 70, frames: [0, 2]),
    ]
    let text = try PprofTests.decode(try #require(Pprof.heapProfile(allocations)))
    let types = text.components(separatedBy: "\n").filter { $0.hasPrefix("sample_type") }.count
    #expect(types == 4, "\(text)")
    for name in ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"] {
      #expect(text.contains("string_table: \"\(name)\""), "\(name)")
    }
    #expect(
      text.contains(
        "location_id: 1\n  location_id: 2\n  location_id: 3\n  value: 10\n  value: 2000\n  value: 3\n  value: 600\n"),
      "\(text)")
    #expect(
      text.contains(
        "location_id: 1\n  location_id: 4\n  location_id: 3\n  value: 2\n  value: 100\n  value: 2\n  value: 100\n"))
    #expect(text.contains("location_id: 1\n  location_id: 3\n  value: 7\n  value: 70\n  value: 0\n  value: 0\n"))
  }

  static func withoutStacks() -> AllocationsReport {
    var report = allocations()
    report.persistentStacks = nil
    report.stackFrames = nil
    return report
  }
}
