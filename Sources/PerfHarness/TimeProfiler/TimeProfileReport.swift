/// The `timeProfile` section of the JSON report.
public struct TimeProfileReport: Codable, Sendable {
  /// `cpu` (per-thread CPU time) or `wall` (wall-clock time, blocked threads included).
  public var clock: String
  public var sampleRateHz: Int
  /// Samples stored (each one weighted by 1 + timer overruns).
  public var sampleCount: Int
  /// Samples that could not be stored (buffer full): counted, never silently dropped.
  public var lostSamples: Int
  public var signalsReceived: Int
  /// Time the samples stand for, all threads together.
  public var totalWeightMilliseconds: Double
  public var durationMilliseconds: Double
  /// The sampler's own cost per sample, in the signal handler (median and 90th percentile;
  /// the kernel's signal delivery is not included).
  public var handlerMedianMicroseconds: Double
  public var handlerP90Microseconds: Double
  /// Median captured stack depth (frames), for reading the handler cost.
  public var medianStackDepth: Int
  /// Time spent turning addresses into names after recording.
  public var symbolizationMilliseconds: Double
  public var uniqueAddresses: Int
  /// Per thread, heaviest first, with Hide System Libraries top functions.
  public var threads: [ThreadSummary]
  /// Top functions over all threads, with Hide System Libraries.
  public var topFunctions: [FunctionWeight]
  /// The symbolized samples (identical stacks merged), from which `perfharness report`
  /// draws call trees and exports.
  public var profile: Profile

  public struct ThreadSummary: Codable, Sendable {
    public var name: String
    public var threadID: Int32
    public var isMain: Bool
    /// Samples recorded on this thread (each weighted by 1 + timer overruns, so fewer than
    /// `weightMilliseconds` at 1 kHz on a CPU-time clock).
    public var sampleCount: Int
    public var weightMilliseconds: Double
    /// This thread's share of all samples' weight.
    public var percent: Double
    public var topFunctions: [FunctionWeight]
  }
}
