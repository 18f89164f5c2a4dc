/// One row of Top Functions: a function's time wherever it appears.
public struct FunctionWeight: Sendable, Codable, Hashable {
  /// The demangled function name.
  public var symbol: String
  public var module: String
  public var isApp: Bool
  /// Milliseconds of samples where this function was executing (the leaf).
  public var selfWeight: Double
  /// Milliseconds of samples this function appears in, counted once per sample.
  public var totalWeight: Double
  /// `selfWeight` as a percentage of the (thread-filtered) profile's weight.
  public var selfPercent: Double
  /// `totalWeight` as a percentage of the (thread-filtered) profile's weight.
  public var totalPercent: Double
  /// Samples this function appears in.
  public var sampleCount: Int

  public init(
    symbol: String, module: String, isApp: Bool, selfWeight: Double, totalWeight: Double,
    selfPercent: Double, totalPercent: Double, sampleCount: Int
  ) {
    self.symbol = symbol
    self.module = module
    self.isApp = isApp
    self.selfWeight = selfWeight
    self.totalWeight = totalWeight
    self.selfPercent = selfPercent
    self.totalPercent = totalPercent
    self.sampleCount = sampleCount
  }
}

extension Profile {
  /// Top Functions as a flat list, heaviest self first (then total, name, module): the same
  /// numbers as the roots of a `topFunctions` ``CallTree``, without building the subtrees.
  /// `limit` keeps the first rows.
  public func topFunctions(threads: Set<Int>? = nil, hideSystemLibraries: Bool, limit: Int? = nil) -> [FunctionWeight] {
    var transformer = StackTransformer(
      profile: self, options: CallTreeOptions(hideSystemLibraries: hideSystemLibraries))
    let functionCount = transformer.functions.count
    var selfWeight = [Double](repeating: 0, count: functionCount)
    var totalWeight = [Double](repeating: 0, count: functionCount)
    var sampleCount = [Int](repeating: 0, count: functionCount)
    // The sample number that last counted each function: counts a recursive function once.
    var lastSeen = [Int](repeating: -1, count: functionCount)
    var total = 0.0
    var path: [Int32] = []
    var sampleNumber = 0
    for sample in samples where threads?.contains(sample.thread) ?? true {
      transformer.transform(sample.stack, into: &path)
      for id in path where lastSeen[Int(id)] != sampleNumber {
        lastSeen[Int(id)] = sampleNumber
        totalWeight[Int(id)] += sample.weight
        sampleCount[Int(id)] += sample.sampleCount
      }
      if let leaf = path.last { selfWeight[Int(leaf)] += sample.weight }
      total += sample.weight
      sampleNumber += 1
    }

    let functions = transformer.functions
    var rows: [FunctionWeight] = []
    for id in 0..<functionCount where sampleCount[id] > 0 {
      rows.append(
        FunctionWeight(
          symbol: functions[id].name, module: functions[id].module, isApp: functions[id].isApp,
          selfWeight: selfWeight[id], totalWeight: totalWeight[id],
          selfPercent: total > 0 ? selfWeight[id] / total * 100 : 0,
          totalPercent: total > 0 ? totalWeight[id] / total * 100 : 0,
          sampleCount: sampleCount[id]))
    }
    rows.sort { a, b in
      if a.selfWeight != b.selfWeight { return a.selfWeight > b.selfWeight }
      if a.totalWeight != b.totalWeight { return a.totalWeight > b.totalWeight }
      if a.symbol != b.symbol { return a.symbol < b.symbol }
      return a.module < b.module
    }
    if let limit, rows.count > limit { rows.removeSubrange(max(0, limit)...) }
    return rows
  }
}
