import Testing

@testable import PerfHarness

// Samples carry only a thread ID; the sampler's table can hold two entries for one (a
// /proc scan that missed a live thread and found it again, or a recycled tid). CI once
// crashed building a profile from such a table at 10 kHz with 64 threads coming and going.
struct ProfileBuilderTests {
  static func thread(_ id: Int32, name: String, cpu: UInt64?) -> SampledThread {
    SampledThread(
      threadID: id, name: name, isMain: false, source: .perfEvent, blocksSignal: false, bornDuring: true,
      cpuNanoseconds: cpu)
  }

  @Test func aThreadListedTwiceIsOneThreadWithBothCPUTimes() {
    let merged = SampledThread.mergingRepeatedIDs([
      Self.thread(7, name: "first", cpu: 1_000), Self.thread(8, name: "other", cpu: 5),
      Self.thread(7, name: "renamed", cpu: 2_000),
    ])
    #expect(merged.map(\.threadID) == [7, 8])
    #expect(merged[0].name == "renamed")
    #expect(merged[0].cpuNanoseconds == 3_000)
  }

  @Test func aProfileFromATableWithARepeatedThreadIDHasEachSampleOnce() throws {
    // No image maps there: the frame is named by its address, which is all this needs.
    let address: UInt = 0x1000
    let samples = (0..<3).map {
      RawSample(
        threadID: 7, weightNanoseconds: 1_000_000, timestampNanoseconds: UInt64($0), handlerNanoseconds: 0,
        frames: [address])
    }
    let result = SamplingResult(
      configuration: SamplerConfiguration(), samples: samples,
      threads: [Self.thread(7, name: "a", cpu: 1), Self.thread(7, name: "b", cpu: 1)],
      lostSamples: 0, signalsReceived: 3, startNanoseconds: 0, stopNanoseconds: 3)
    var builder = ProfileBuilder(symbolizer: try Symbolizer())
    let profile = builder.build(from: result)
    #expect(profile.threads.count == 1)
    #expect(profile.samples.map { $0.count ?? 1 }.reduce(0, +) == 3)
  }
}
