/// The instruments a scenario can be recorded with, named as on the command line.
public enum Instrument: String, CaseIterable, Sendable, Codable {
  /// The Time Profiler: signal-timer sampling of every thread.
  case time
  /// The Allocations instrument: every heap block by type and generation.
  case allocations
  /// The memory graph: leaked blocks and retain cycles.
  case leaks

  /// The instruments this build can record.
  public static var available: [Instrument] { [.time, .allocations] }
}
