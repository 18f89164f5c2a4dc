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

  /// What a scenario records when it declares nothing else (`Scenario(instruments:)`) and
  /// `--instruments` is not given. The leaks instrument is opt-in: a conservative
  /// scan can still, rarely, find a stale word that keeps a leaked cycle looking
  /// reachable, and its analysis costs up to a second per run in debug builds.
  public static var defaults: [Instrument] { [.time, .allocations] }
}
