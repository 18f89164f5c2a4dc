import Foundation
import PerfHarness
import Testing

/// The tutorial's Time Profiler findings, measured on the scenario through the built binary.
@Suite("Time Profiler on filtered-thumbnail-scrolling", .serialized)
struct TimeProfilerScenarioTests {
  let perfharness = try! BuiltBinary("perfharness")

  private func profile(variant: String) throws -> TimeProfileReport {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try perfharness.run([
      "scenario", "filtered-thumbnail-scrolling", "--variant", variant, "--iterations", "1",
      "--instruments", "time", "--format", "json", "--output", directory.path,
    ])
    #expect(result.status == 0, "\(result.standardError)")
    let report = try JSONDecoder().decode(Report.self, from: Data(result.standardOutput.utf8))
    #expect(
      FileManager.default.fileExists(
        atPath: directory.appendingPathComponent("filtered-thumbnail-scrolling/\(variant)/profile.folded").path))
    let timeProfile = try #require(report.timeProfile)
    // One count of samples everywhere: the header's, the threads', the call tree's.
    #expect(timeProfile.threads.reduce(0) { $0 + $1.sampleCount } == timeProfile.sampleCount)
    #expect(CallTree(profile: timeProfile.profile, options: .init()).sampleCount == timeProfile.sampleCount)
    #expect(timeProfile.profile.samples.count < timeProfile.sampleCount, "identical stacks are merged")
    // The harness's hooks in this executable are not the program's code.
    let hooks = timeProfile.profile.frames.filter { $0.module.hasPrefix("CPerf") || ($0.file ?? "").contains("CPerf") }
    #expect(hooks.allSatisfy { !$0.isApp && $0.module.hasPrefix("CPerf") }, "\(hooks.map(\.name))")
    return timeProfile
  }

  @Test("starter: the tonal filter is the main thread's heaviest function, called from cellForItem")
  func starter() throws {
    let profile = try profile(variant: "starter")
    let main = try #require(profile.threads.first(where: { $0.isMain }))
    let heaviest = try #require(main.topFunctions.first)
    #expect(heaviest.symbol.contains("applyTonalFilter"), "\(main.topFunctions.prefix(3).map(\.symbol))")

    // Invert the main thread's tree and follow the heaviest callers from the filter.
    let mainIndex = try #require(profile.profile.threads.firstIndex(where: { $0.isMain }))
    let inverted = CallTree(
      profile: profile.profile, options: .init(invert: true, hideSystemLibraries: true, topFunctions: true),
      threads: [mainIndex])
    let filter = try #require(inverted.roots.first(where: { $0.name.hasSuffix("applyTonalFilter()") }))
    var callers: [String] = []
    var node = filter
    while let next = node.children.first {
      callers.append(next.name)
      node = next
    }
    #expect(callers.contains { $0.contains("collectionView(_:cellForItemAt:)") }, "\(callers)")
    #expect(profile.lostSamples == 0)
  }

  @Test("fixed: the filter runs on worker threads; the main thread spends under 10% in it")
  func fixed() throws {
    let profile = try profile(variant: "fixed")
    let mainIndex = try #require(profile.profile.threads.firstIndex(where: { $0.isMain }))
    let mainShare =
      profile.profile.topFunctions(threads: [mainIndex], hideSystemLibraries: true)
      .filter { $0.symbol.contains("applyTonalFilter") }.map(\.totalPercent).max() ?? 0
    #expect(mainShare < 10)
    let workers = Set(profile.profile.threads.indices).subtracting([mainIndex])
    let workerFilter = profile.profile.topFunctions(threads: workers, hideSystemLibraries: true)
      .first { $0.symbol.contains("applyTonalFilter") }
    #expect((workerFilter?.totalWeight ?? 0) > 0, "worker threads ran the filter")
  }
}
