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

  /// Whether no limit is set (the warm-up alone limits nothing).
  public var isEmpty: Bool {
    !Limit.all.contains { $0.instrument != nil && $0.isSet(in: self) }
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
    Set(Limit.all.filter { $0.isSet(in: self) }.compactMap(\.instrument))
  }
}
