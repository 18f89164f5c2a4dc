import CPerfSampler

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
    let intervalMilliseconds = 1000 / Double(result.configuration.rateHz)  // nominal
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
      for (position, address) in withoutStaleAsyncFrames(sample.frames).enumerated().reversed() {
        if address & Self.asyncFrameTag != 0 {
          // A Swift task's logical frame: a resume function's entry, or the marker.
          let entry = address & ~Self.asyncFrameTag
          stack += entry == 0 ? [index(of: Self.asyncMarker)] : framesAt(entry, isReturnAddress: false)
        } else {
          stack += framesAt(address, isReturnAddress: position > 0)
        }
      }
      let key = StackKey(thread: thread, stack: stack)
      if merged[key] == nil { order.append(key) }
      merged[key, default: (0, 0)].weight += sample.weightMilliseconds
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

  /// A task's logical chain read from the context it was last resumed with (the sampler's
  /// way where the running function keeps no frame record) starts with the functions that
  /// have returned since, down to the running one: those frames, up to the running
  /// function's own, are dropped. (An async function that awaits itself loses one level.)
  private mutating func withoutStaleAsyncFrames(_ addresses: [UInt]) -> [UInt] {
    guard let first = addresses.firstIndex(where: { $0 & Self.asyncFrameTag != 0 }), first > 0 else {
      return addresses
    }
    let running = function(at: addresses[first - 1], isReturnAddress: first - 1 > 0)
    var end = first
    while end < addresses.count, addresses[end] & Self.asyncFrameTag != 0, addresses[end] != Self.asyncFrameTag {
      end += 1
    }
    guard
      let same = (first..<end).first(where: {
        function(at: addresses[$0] & ~Self.asyncFrameTag, isReturnAddress: false) == running
      })
    else { return addresses }
    var kept = addresses
    kept.removeSubrange(first...same)
    return kept
  }

  /// The function (outermost frame) an address is in, by name and module.
  private mutating func function(at address: UInt, isReturnAddress: Bool) -> String {
    guard let outermost = framesAt(address, isReturnAddress: isReturnAddress).first else { return "" }
    return frames[outermost].name + "\u{0}" + frames[outermost].module
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

  static let asyncFrameTag = UInt(CPerfSampler_AsyncFrameTag)

  /// Where a sample's thread stack ends at the executor and its Swift task's logical
  /// chain begins: the executor's frames are its callers, the task's awaiting functions
  /// (outermost first) its callees.
  static let asyncMarker = ProfileFrame(name: asyncMarkerName, module: "Swift Concurrency", isApp: false)
  static let asyncMarkerName = "Swift task (awaiting callers below)"

  static func profileFrame(_ frame: SymbolizedFrame) -> ProfileFrame {
    ProfileFrame(
      name: frame.swiftModule != nil
        ? SymbolName.simplified(frame.symbol) : SymbolName.withoutPartialFunction(frame.symbol),
      module: frame.reportedModule, isApp: CodeOwnership.isAppCode(frame),
      file: frame.file, line: frame.line, isInlined: frame.isInlined ? true : nil)
  }

}
