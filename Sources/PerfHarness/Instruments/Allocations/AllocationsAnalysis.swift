/// Turns an `AllocationRecording` into an `AllocationsReport`: per-category persistent
/// and transient counts, generation growth with the heaviest allocation stacks, the
/// live-heap timeline.
struct AllocationsAnalysis {
  /// The label of the generation after the last mark.
  static let afterLastMarkLabel = "After last mark"

  /// Growth categories listed per generation.
  var growthCategoryLimit = 10
  /// Decides `isApp` for a frame. The main repo's `CodeOwnership.isAppCode` also treats
  /// the harness's own modules and the standard library's specializations as system.
  var isAppFrame: (SymbolizedFrame) -> Bool = { $0.isMainExecutable }
  /// Hide System Libraries: drop non-app frames from growth stacks (kept when the whole
  /// stack is system code).
  var hideSystemLibraries = false

  /// The report's stages, each a value: categories, totals, generations, stack views.
  func report(from recording: AllocationRecording, symbolizer: Symbolizer?) -> AllocationsReport {
    var stacks = SymbolizedStacks(analysis: self, recording: recording, symbolizer: symbolizer)
    let persistentCount = recording.liveBlocks.count
    let views = recording.mode == .fullStacks ? stackViews(recording, &stacks) : nil
    let timeline = recording.timeline.map {
      AllocationsReport.TimelinePoint(
        timeMilliseconds: recording.milliseconds($0.timestampNanoseconds), liveBytes: $0.liveBytes)
    }
    return AllocationsReport(
      mode: recording.mode.rawValue,
      durationMilliseconds: recording.milliseconds(recording.stopNanoseconds),
      totals: totals(recording), categories: categories(recording), generations: generations(recording, &stacks),
      timeline: timeline,
      lost: AllocationsReport.Lost(
        blocks: recording.lostBlocks, stacks: recording.lostStacks,
        freedCategories: recording.lostFreedKeys, timelinePoints: recording.lostTimeline,
        stackTotals: recording.mode == .fullStacks ? recording.lostStackTotals : nil, marks: recording.lostMarks),
      overhead: AllocationsReport.Overhead(
        blockTableBytes: recording.blockTableBytes, stackTableBytes: recording.stackTableBytes,
        bytesPerLiveBlock: persistentCount > 0 ? Double(recording.blockTableBytes) / Double(persistentCount) : 0),
      persistentStacks: views?.persistent, stackFrames: views?.frames, totalStacks: views?.totals)
  }

  /// Each allocation stack symbolized once, whichever stage asks first.
  struct SymbolizedStacks {
    let analysis: AllocationsAnalysis
    let recording: AllocationRecording
    let symbolizer: Symbolizer?
    private var cache: [UInt32: [AllocationsReport.StackFrame]] = [:]

    init(analysis: AllocationsAnalysis, recording: AllocationRecording, symbolizer: Symbolizer?) {
      self.analysis = analysis
      self.recording = recording
      self.symbolizer = symbolizer
    }

    mutating func frames(_ id: UInt32) -> [AllocationsReport.StackFrame] {
      if let cached = cache[id] { return cached }
      let result = analysis.symbolize(recording.stacks[id] ?? [], symbolizer: symbolizer)
      cache[id] = result
      return result
    }
  }

  private struct Tally {
    var persistentCount = 0
    var persistentBytes = 0
    var transientCount = 0
    var transientBytes = 0

    mutating func add(_ other: Tally) {
      persistentCount += other.persistentCount
      persistentBytes += other.persistentBytes
      transientCount += other.transientCount
      transientBytes += other.transientBytes
    }
  }

  /// Persistent counts from the live blocks, transient from the freed aggregates, by name.
  func categories(_ recording: AllocationRecording) -> [AllocationsReport.Category] {
    var tallies: [AllocationCategoryKey: Tally] = [:]
    for block in recording.liveBlocks {
      tallies[block.categoryKey, default: Tally()].persistentCount += 1
      tallies[block.categoryKey]!.persistentBytes += block.size
    }
    for (key, freed) in recording.freed {
      tallies[key, default: Tally()].transientCount += freed.count
      tallies[key]!.transientBytes += freed.bytes
    }
    // Different metadata can name the same type (e.g. an unreadable header): merge by name.
    var byName: [String: (kind: AllocationCategory.Kind, isApp: Bool, tally: Tally)] = [:]
    for (key, tally) in tallies {
      let category = recording.category(for: key)
      var entry = byName[category.name] ?? (category.kind, false, Tally())
      entry.isApp = entry.isApp || category.isApp
      entry.tally.add(tally)
      byName[category.name] = entry
    }
    return byName.map { name, entry in
      AllocationsReport.Category(
        name: name, kind: entry.kind.rawValue, isApp: entry.isApp, persistentCount: entry.tally.persistentCount,
        transientCount: entry.tally.transientCount,
        totalCount: entry.tally.persistentCount + entry.tally.transientCount,
        persistentBytes: entry.tally.persistentBytes,
        totalBytes: entry.tally.persistentBytes + entry.tally.transientBytes)
    }.sorted {
      ($0.persistentBytes, $0.totalBytes, $1.name) > ($1.persistentBytes, $1.totalBytes, $0.name)
    }
  }

  func totals(_ recording: AllocationRecording) -> AllocationsReport.Totals {
    AllocationsReport.Totals(
      totalAllocations: recording.totalAllocations, totalBytes: recording.totalBytes,
      persistentCount: recording.liveBlocks.count, persistentBytes: recording.liveBlocks.reduce(0) { $0 + $1.size },
      transientCount: recording.freed.values.reduce(0) { $0 + $1.count },
      transientBytes: recording.freed.values.reduce(0) { $0 + $1.bytes },
      peakLiveBytes: recording.peakLiveBytes, liveBytesAtEnd: recording.liveBytesAtEnd)
  }

  private struct Growth {
    var bytes = 0
    var count = 0
    var stackBytes: [UInt32: Int] = [:]
  }

  /// As in Instruments, a mark closes a generation: the generation labelled with a mark
  /// holds what was allocated since the previous mark (or the start) up to it. What was
  /// allocated after the last mark forms a last generation.
  func generations(_ recording: AllocationRecording, _ stacks: inout SymbolizedStacks)
    -> [AllocationsReport.Generation]
  {
    let generationCount = (recording.marks.map(\.index).max() ?? 0) + 1
    var growth = [[String: Growth]](repeating: [:], count: generationCount)
    for block in recording.liveBlocks where block.generation < generationCount {
      let name = recording.category(for: block.categoryKey).name
      var entry = growth[block.generation][name] ?? Growth()
      entry.bytes += block.size
      entry.count += 1
      if block.stackID != 0 { entry.stackBytes[block.stackID, default: 0] += block.size }
      growth[block.generation][name] = entry
    }
    let marksByIndex = Dictionary(recording.marks.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
    return (0..<generationCount).map { index in
      let opening = marksByIndex[index]
      let closing = marksByIndex[index + 1]
      let categoriesOfGeneration = growth[index].sorted { ($0.value.bytes, $1.key) > ($1.value.bytes, $0.key) }
      let top = categoriesOfGeneration.prefix(growthCategoryLimit).map { name, entry in
        let heaviest = entry.stackBytes.max { ($0.value, $1.key) < ($1.value, $0.key) }?.key
        return AllocationsReport.GrowthCategory(
          name: name, growthBytes: entry.bytes, growthCount: entry.count,
          allocationStack: heaviest.map { stacks.frames($0) } ?? [])
      }
      return AllocationsReport.Generation(
        index: index,
        label: closing?.label ?? (index == 0 ? "Whole run" : Self.afterLastMarkLabel),
        startMilliseconds: index == 0
          ? 0 : recording.milliseconds(opening?.timestampNanoseconds ?? recording.startNanoseconds),
        endMilliseconds: recording.milliseconds(closing?.timestampNanoseconds ?? recording.stopNanoseconds),
        growthBytes: growth[index].values.reduce(0) { $0 + $1.bytes },
        growthCount: growth[index].values.reduce(0) { $0 + $1.count },
        liveBytes: closing?.liveBytes ?? recording.liveBytesAtEnd,
        categories: Array(top))
    }
  }

  private struct StackTally {
    var count = 0
    var bytes = 0
    var bytesByCategory: [AllocationCategoryKey: Int] = [:]
  }

  /// Persistent blocks by stack, the heaviest stacks, symbolized once each, in one frame
  /// table; and the total allocated by each of them and by the heaviest stacks overall.
  func stackViews(_ recording: AllocationRecording, _ stacks: inout SymbolizedStacks) -> (
    persistent: [AllocationsReport.PersistentStack], totals: [AllocationsReport.TotalStack],
    frames: [AllocationsReport.StackFrame]
  ) {
    var frameIndex: [AllocationsReport.StackFrame: Int] = [:]
    var table: [AllocationsReport.StackFrame] = []
    func indexed(_ id: UInt32) -> [Int] {
      stacks.frames(id).map { frame in
        if let known = frameIndex[frame] { return known }
        table.append(frame)
        frameIndex[frame] = table.count - 1
        return table.count - 1
      }
    }
    var byStack: [UInt32: StackTally] = [:]
    for block in recording.liveBlocks where block.stackID != 0 {
      byStack[block.stackID, default: StackTally()].count += 1
      byStack[block.stackID]!.bytes += block.size
      byStack[block.stackID]!.bytesByCategory[block.categoryKey, default: 0] += block.size
    }
    let keptPersistent = byStack.sorted { ($0.value.bytes, $1.key) > ($1.value.bytes, $0.key) }
      .prefix(Self.persistentStackLimit)
    let persistent = keptPersistent.map { id, tally in
      let heaviest = tally.bytesByCategory.max { ($0.value, "\($1.key)") < ($1.value, "\($0.key)") }?.key
      return AllocationsReport.PersistentStack(
        count: tally.count, bytes: tally.bytes,
        category: heaviest.map { recording.category(for: $0).name } ?? "",
        frames: indexed(id))
    }
    // The heaviest stacks, and every persistent stack kept above: a reader pairs each
    // persistent stack with its total.
    let heaviestTotals = recording.allocationsByStack.sorted { ($0.value.bytes, $1.key) > ($1.value.bytes, $0.key) }
      .prefix(Self.persistentStackLimit).map(\.key)
    var totalIDs = heaviestTotals
    var seen = Set(heaviestTotals)
    for (id, _) in keptPersistent where recording.allocationsByStack[id] != nil && seen.insert(id).inserted {
      totalIDs.append(id)
    }
    let totals = totalIDs.map { id in
      let total = recording.allocationsByStack[id]!
      return AllocationsReport.TotalStack(count: total.count, bytes: total.bytes, frames: indexed(id))
    }
    return (persistent, totals, table)
  }

  /// Stacks kept in `persistentStacks`, heaviest first.
  static let persistentStackLimit = 300

  /// Leaf first; each address expands to its inlined frames (innermost first).
  func symbolize(_ addresses: [UInt], symbolizer: Symbolizer?) -> [AllocationsReport.StackFrame] {
    var frames: [AllocationsReport.StackFrame] = []
    for address in addresses {
      guard let symbolizer else {
        frames.append(
          AllocationsReport.StackFrame(
            symbol: "0x" + String(address, radix: 16), module: "???", file: nil, line: nil, isApp: false))
        continue
      }
      for frame in symbolizer.frames(at: address, isReturnAddress: true) {
        frames.append(
          AllocationsReport.StackFrame(
            symbol: frame.swiftModule != nil ? SymbolName.simplified(frame.symbol) : frame.symbol,
            module: frame.reportedModule, file: frame.file, line: frame.line,
            isApp: isAppFrame(frame)))
      }
    }
    if hideSystemLibraries, frames.contains(where: \.isApp) {
      return frames.filter(\.isApp)
    }
    return frames
  }
}

extension AllocationRecording {
  /// Milliseconds since the recording started (0 for a time before it).
  func milliseconds(_ ns: UInt64) -> Double {
    ns >= startNanoseconds ? Double(ns - startNanoseconds) / 1e6 : 0
  }
}
