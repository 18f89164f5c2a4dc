/// The instruments a scenario can be recorded with, named as on the command line.
public enum Instrument: String, CaseIterable, Sendable, Codable {
  /// The Time Profiler: signal-timer sampling of every thread.
  case time
  /// The Allocations instrument: every heap block by type and generation.
  case allocations
  /// The memory graph: leaked blocks and retain cycles.
  case leaks

  /// The instruments this build can record.
  public static var available: [Instrument] { [.time, .allocations, .leaks] }

  /// What runs without `--instruments`. The leaks instrument is opt-in: blocks allocated
  /// before recording are unknown to its graph, so a new block referenced only from one
  /// of them reads as leaked, and stale stack words can hide a cycle.
  public static var defaults: [Instrument] { [.time, .allocations] }
}
