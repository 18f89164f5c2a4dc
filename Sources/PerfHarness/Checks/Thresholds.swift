/// A scenario's CI limits: what `perfharness scenario --check` enforces.
///
/// Declared per scenario in a human-editable YAML file (see `Scenarios/thresholds/`);
/// command-line flags override them.
public struct Thresholds: Hashable, Sendable {
  /// Most bytes any generation after the warm-up may keep (allocated in it and still live
  /// at the end of the run).
  public var maxGrowthPerGeneration: ByteSize?
  /// Generations at the start that may grow freely (caches filling, first-use set-up).
  public var warmUpGenerations: Int = 1
  /// Most bytes in leaked blocks.
  public var maxLeakedBytes: ByteSize?
  /// Most retain cycles among leaked blocks.
  public var maxCycles: Int?
  /// Most live instances at the end (# Persistent) of the named types.
  public var maxPersistent: [String: Int] = [:]
  /// Most live heap at any time.
  public var maxPeakHeap: ByteSize?
  /// Least share of the threads' CPU time the Time Profiler's samples must stand for
  /// (`coveragePercent`, cpu clock), in percent.
  public var minCoveragePercent: Double?

  public init() {}

  public var isEmpty: Bool {
    maxGrowthPerGeneration == nil && maxLeakedBytes == nil && maxCycles == nil && maxPersistent.isEmpty
      && maxPeakHeap == nil && minCoveragePercent == nil
  }

  /// `other`'s limits where it sets them, these elsewhere.
  public func overridden(by other: Thresholds) -> Thresholds {
    var result = self
    if let value = other.maxGrowthPerGeneration { result.maxGrowthPerGeneration = value }
    if other.warmUpGenerations != Thresholds().warmUpGenerations { result.warmUpGenerations = other.warmUpGenerations }
    if let value = other.maxLeakedBytes { result.maxLeakedBytes = value }
    if let value = other.maxCycles { result.maxCycles = value }
    result.maxPersistent.merge(other.maxPersistent) { _, new in new }
    if let value = other.maxPeakHeap { result.maxPeakHeap = value }
    if let value = other.minCoveragePercent { result.minCoveragePercent = value }
    return result
  }

  /// The instruments these limits need measurements from.
  public var requiredInstruments: Set<Instrument> {
    var instruments = Set<Instrument>()
    if maxGrowthPerGeneration != nil || !maxPersistent.isEmpty || maxPeakHeap != nil {
      instruments.insert(.allocations)
    }
    if maxLeakedBytes != nil || maxCycles != nil { instruments.insert(.leaks) }
    if minCoveragePercent != nil { instruments.insert(.time) }
    return instruments
  }
}
