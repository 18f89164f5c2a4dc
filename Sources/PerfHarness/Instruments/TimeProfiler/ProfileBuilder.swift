/// Turns raw samples (addresses) into a symbolized ``Profile``: where samples become frames.
struct ProfileBuilder {
  private let symbolizer: Symbolizer
  private var frameIndex: [ProfileFrame: Int] = [:]
  private var frames: [ProfileFrame] = []
  private var addressFrames: [AddressKey: [Int]] = [:]

  private struct AddressKey: Hashable {
    var address: UInt
    var isReturnAddress: Bool
  }

  init(symbolizer: Symbolizer) {
    self.symbolizer = symbolizer
  }

  var uniqueAddresses: Int { addressFrames.count }

  /// - Returns: the profile, with identical (thread, stack) samples merged.
  mutating func build(from result: SamplingResult) -> Profile {
    let intervalMilliseconds = 1000 / Double(result.configuration.rateHz)
    let sampledThreads = Set(result.samples.map(\.threadID))
    let threads = SampledThread.mergingRepeatedIDs(result.threads).filter { sampledThreads.contains($0.threadID) }
      .sorted { ($0.isMain ? 0 : 1, $0.threadID) < ($1.isMain ? 0 : 1, $1.threadID) }
    let threadIndex = Dictionary(uniqueKeysWithValues: threads.enumerated().map { ($1.threadID, $0) })

    struct StackKey: Hashable {
      var thread: Int
      var stack: [Int]
    }
    var merged: [StackKey: (weight: Double, count: Int)] = [:]
    var order: [StackKey] = []
    for sample in result.samples {
      guard let thread = threadIndex[sample.threadID] else { continue }
      var stack: [Int] = []
      stack.reserveCapacity(sample.frames.count + 4)
      // Captured leaf first; a profile stack is root first.
      for (position, address) in sample.frames.enumerated().reversed() {
        stack += framesAt(address, isReturnAddress: position > 0)
      }
      let key = StackKey(thread: thread, stack: stack)
      if merged[key] == nil { order.append(key) }
      merged[key, default: (0, 0)].weight += Double(sample.weight) * intervalMilliseconds
      merged[key, default: (0, 0)].count += 1
    }
    return Profile(
      frames: frames,
      threads: threads.map {
        ProfileThread(name: Self.threadName($0), isMain: $0.isMain, threadID: $0.threadID)
      },
      samples: order.map {
        let total = merged[$0]!
        return ProfileSample(thread: $0.thread, weight: total.weight, stack: $0.stack, count: total.count)
      },
      sampleIntervalMilliseconds: intervalMilliseconds)
  }

  /// Names as Instruments shows them, without the thread ID (it is `threadID`). Dispatch's
  /// worker threads are named after their root queue, truncated by the kernel to 15 bytes
  /// ("oot.default-qos"): say what they are.
  static func threadName(_ thread: SampledThread) -> String {
    if thread.isMain { return "Main Thread" }
    if thread.name.contains("qos") || thread.name.hasPrefix("com.apple.root") {
      return "Dispatch worker"
    }
    return thread.name
  }

  /// Frame indices for one address, outermost first (inlined callees after their caller).
  private mutating func framesAt(_ address: UInt, isReturnAddress: Bool) -> [Int] {
    let key = AddressKey(address: address, isReturnAddress: isReturnAddress)
    if let known = addressFrames[key] { return known }
    let symbolized = symbolizer.frames(at: address, isReturnAddress: isReturnAddress)
    let indices = symbolized.reversed().map { index(of: Self.profileFrame($0)) }
    addressFrames[key] = indices
    return indices
  }

  private mutating func index(of frame: ProfileFrame) -> Int {
    if let index = frameIndex[frame] { return index }
    frames.append(frame)
    frameIndex[frame] = frames.count - 1
    return frames.count - 1
  }

  static func profileFrame(_ frame: SymbolizedFrame) -> ProfileFrame {
    ProfileFrame(
      name: frame.swiftModule != nil ? SymbolName.simplified(frame.symbol) : frame.symbol,
      module: frame.reportedModule, isApp: CodeOwnership.isAppCode(frame),
      file: frame.file, line: frame.line, isInlined: frame.isInlined ? true : nil)
  }

}
