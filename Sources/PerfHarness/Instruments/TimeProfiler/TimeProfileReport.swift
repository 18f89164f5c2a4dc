/// The `timeProfile` section of the JSON report.
public struct TimeProfileReport: Codable, Sendable {
  /// `cpu` (per-thread CPU time) or `wall` (wall-clock time, blocked threads included).
  public var clock: String
  public var sampleRateHz: Int
  /// Samples stored (each weighted by its thread's CPU time since the thread's previous one).
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
  /// What delivered the samples: `perf-event` (a per-thread cpu-clock perf event, at the
  /// requested rate), `timer` (POSIX timers; CPU-time ones fire on kernel ticks), or both.
  public var sampleSource: String?
  /// Why threads were given timers instead of perf events, when they were.
  public var sampleSourceNote: String?
  /// Samples per second of CPU time of the threads that have samples (cpu clock).
  public var samplesPerCPUSecond: Double?
  /// CPU time of every thread seen while recording, from its start or the recording's
  /// to its end or the recording's (cpu clock): what the samples should add up to.
  public var cpuMilliseconds: Double?
  /// `totalWeightMilliseconds` over `cpuMilliseconds` (cpu clock).
  public var coveragePercent: Double?
  /// Threads that used CPU time while recording but have no sample, and why (threads
  /// with less CPU time than one period are only counted, in `shortThreads`); on the wall
  /// clock, threads with time blocked where a tick would have caused EINTR.
  public var unsampled: [UnsampledThread]?
  /// Threads without a sample that used less CPU time than one sampling period each, and
  /// their CPU time together.
  public var shortThreads: Int?
  public var shortThreadsCPUMilliseconds: Double?
  /// The program's own SIGPROF disposition, when it has one, and what that did to sampling.
  public var signalHandlerNote: String?
  /// Whether each sample came after a period drawn from 0.5-1.5 times the mean (true), or
  /// after the fixed period (false: work repeating at the sampling period can alias).
  /// Absent in reports written before it was recorded.
  public var periodDithered: Bool? = nil

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
    /// `perf-event` or `timer`.
    public var source: String?
    /// Its CPU time while recording (see `TimeProfileReport.cpuMilliseconds`).
    public var cpuMilliseconds: Double?
    /// `weightMilliseconds` over `cpuMilliseconds`.
    public var coveragePercent: Double?
    /// `sampleCount` per second of `cpuMilliseconds`: the rate achieved on this thread.
    public var samplesPerCPUSecond: Double?
  }

  /// A thread that used CPU time while recording and has no sample.
  public struct UnsampledThread: Codable, Sendable {
    public var name: String
    public var threadID: Int32
    public var cpuMilliseconds: Double?
    /// Wall clock: time blocked where a tick would have made the call fail with EINTR.
    public var blockedMilliseconds: Double?
    /// `blocks SIGPROF`, `SIGPROF handler replaced by the program`, `not armed`,
    /// `no sample`, or (wall clock) `blocked in <call>, not signalled (EINTR)`.
    public var reason: String
  }
}
