/// One symbolized stack frame of a recorded profile.
///
/// Frames are deduplicated by whoever builds the ``Profile``: the same name, module, file and
/// line always map to the same index in ``Profile/frames``. Call trees aggregate by *function*
/// (name and module), so several frames (different lines of one function) can become one node.
public struct ProfileFrame: Hashable, Sendable, Codable {
  /// The demangled function name, for example `MyApp.Renderer.draw(_:)`.
  public var name: String
  /// The Swift module or image the code lives in (`"MyApp"`, `"libc.so.6"`).
  public var module: String
  /// `true` for the profiled program's own code, `false` for system libraries.
  /// Drives Hide System Libraries.
  public var isApp: Bool
  /// The source file, when debug information names one.
  public var file: String?
  /// The source line, when debug information names one.
  public var line: Int?
  /// `true` when the compiler inlined this function into the frame that follows it in a
  /// stack (its caller): both are one machine frame, one return address. Absent otherwise.
  public var isInlined: Bool?

  public init(
    name: String, module: String, isApp: Bool, file: String? = nil, line: Int? = nil, isInlined: Bool? = nil
  ) {
    self.name = name
    self.module = module
    self.isApp = isApp
    self.file = file
    self.line = line
    self.isInlined = isInlined
  }
}

/// A thread that samples were taken on.
public struct ProfileThread: Hashable, Sendable, Codable {
  /// The thread's name (`"Main Thread"`, `"dispatch-worker"`).
  public var name: String
  /// Whether this is the process's main thread.
  public var isMain: Bool
  /// The kernel thread ID.
  public var threadID: Int32

  public init(name: String, isMain: Bool, threadID: Int32) {
    self.name = name
    self.isMain = isMain
    self.threadID = threadID
  }
}

/// One sample: a stack and the time it stands for.
public struct ProfileSample: Sendable, Codable {
  /// Index into ``Profile/threads``.
  public var thread: Int
  /// The time this sample stands for, in milliseconds: its thread's CPU time (wall time on
  /// the wall clock) since the thread's previous sample.
  public var weight: Double
  /// Indices into ``Profile/frames``, root (outermost caller) first, leaf (the executing
  /// function) last.
  public var stack: [Int]
  /// Milliseconds since the start of recording, when known.
  public var timestamp: Double?
  /// How many recorded samples of this thread and stack this one stands for (the report
  /// merges identical ones); nil means one.
  public var count: Int?

  /// The recorded samples this one stands for.
  public var sampleCount: Int { count ?? 1 }

  public init(thread: Int, weight: Double, stack: [Int], timestamp: Double? = nil, count: Int? = nil) {
    self.thread = thread
    self.weight = weight
    self.stack = stack
    self.timestamp = timestamp
    self.count = count
  }
}

/// A recorded Time Profiler run: the input of call trees, Top Functions and the exports.
public struct Profile: Sendable, Codable {
  /// Deduplicated frames that sample stacks index into.
  public var frames: [ProfileFrame]
  /// Threads that samples index into.
  public var threads: [ProfileThread]
  /// The samples, in recording order.
  public var samples: [ProfileSample]
  /// The nominal sampling interval in milliseconds (1 ms at 1 kHz).
  public var sampleIntervalMilliseconds: Double

  public init(
    frames: [ProfileFrame] = [],
    threads: [ProfileThread] = [],
    samples: [ProfileSample] = [],
    sampleIntervalMilliseconds: Double = 1
  ) {
    self.frames = frames
    self.threads = threads
    self.samples = samples
    self.sampleIntervalMilliseconds = sampleIntervalMilliseconds
  }

  /// The summed weight (milliseconds) of the samples on `threads` (all threads when `nil`).
  public func totalWeight(threads: Set<Int>? = nil) -> Double {
    var total = 0.0
    for sample in samples where threads?.contains(sample.thread) ?? true {
      total += sample.weight
    }
    return total
  }
}

extension Profile {
  /// The harness's own Swift modules, linked into every scenario executable. A recorded
  /// stack runs through them from the process's entry to the scenario's body, so a reader
  /// can fold those frames away and start at the program's code.
  public static var harnessModules: [String] { CodeOwnership.harnessModules.sorted() }
}
