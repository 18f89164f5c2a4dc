/// A function as call trees see it: every frame with the same name and module.
public struct ProfileFunction: Hashable, Sendable, Codable {
  public var name: String
  public var module: String
  public var isApp: Bool
  /// The file of the first frame seen for this function (lines differ within a function).
  public var file: String?
  /// The line of the first frame seen for this function.
  public var line: Int?

  public init(name: String, module: String, isApp: Bool, file: String? = nil, line: Int? = nil) {
    self.name = name
    self.module = module
    self.isApp = isApp
    self.file = file
    self.line = line
  }

  /// Stands for the whole stack of a sample that had no app frame, under Hide System Libraries,
  /// so that totals still add up.
  public static let systemLibraries = ProfileFunction(name: "<system libraries>", module: "", isApp: false)
  /// Stands for an empty stack or a frame index out of range.
  public static let unknown = ProfileFunction(name: "<unknown>", module: "", isApp: false)
}

/// Identical stacks of one thread, aggregated, after Hide System Libraries, Flatten Recursion
/// and Invert Call Tree have been applied.
public struct FunctionStack: Hashable, Sendable {
  /// Index into ``Profile/threads`` (may be out of range if a sample's was).
  public var thread: Int
  /// Indices into ``FunctionStacks/functions``, in display order: root first, or leaf first
  /// when inverted. Never empty.
  public var functions: [Int]
  /// Summed weight in milliseconds.
  public var weight: Double
  /// How many samples had this stack.
  public var sampleCount: Int

  public init(thread: Int, functions: [Int], weight: Double, sampleCount: Int) {
    self.thread = thread
    self.functions = functions
    self.weight = weight
    self.sampleCount = sampleCount
  }
}

/// The distinct stacks of a profile at function granularity; what exporters render.
public struct FunctionStacks: Sendable {
  public var functions: [ProfileFunction]
  /// In order of first occurrence in the profile.
  public var stacks: [FunctionStack]
}

extension Profile {
  /// The profile's stacks at function granularity, with `options.hideSystemLibraries`,
  /// `options.flattenRecursion` and `options.invert` applied (`separateByThread` and
  /// `topFunctions` are views on top of these and are ignored), identical stacks of a thread
  /// merged.
  public func functionStacks(options: CallTreeOptions = .init(), threads: Set<Int>? = nil) -> FunctionStacks {
    var transformer = StackTransformer(profile: self, options: options)
    var index: [StackKey: Int] = [:]
    var stacks: [FunctionStack] = []
    var path: [Int32] = []
    for sample in samples where threads?.contains(sample.thread) ?? true {
      transformer.transform(sample.stack, into: &path)
      let key = StackKey(thread: sample.thread, path: path)
      if let existing = index[key] {
        stacks[existing].weight += sample.weight
        stacks[existing].sampleCount += sample.sampleCount
      } else {
        index[key] = stacks.count
        stacks.append(
          FunctionStack(
            thread: sample.thread, functions: path.map(Int.init), weight: sample.weight,
            sampleCount: sample.sampleCount))
      }
    }
    return FunctionStacks(functions: transformer.functions, stacks: stacks)
  }
}

private struct StackKey: Hashable {
  var thread: Int
  var path: [Int32]
}

/// Turns frame-index stacks into function-index paths with the per-sample options applied.
/// Shared by the call tree and the exports so they always agree on what a stack is.
struct StackTransformer {
  private(set) var functions: [ProfileFunction] = []
  /// Function index of every frame of the profile.
  private let functionOfFrame: [Int32]
  private let isApp: [Bool]
  private let options: CallTreeOptions
  let systemLibrariesID: Int32
  let unknownID: Int32
  /// How often each function occurs in the path being flattened; reset after each sample
  /// by walking the path, so it never costs O(functions) per sample.
  private var occurrences: [Int32]
  private var scratch: [Int32] = []

  init(profile: Profile, options: CallTreeOptions) {
    self.options = options
    var ids: [FunctionKey: Int32] = [:]
    var functions: [ProfileFunction] = []
    var functionOfFrame: [Int32] = []
    functionOfFrame.reserveCapacity(profile.frames.count)
    for frame in profile.frames {
      let key = FunctionKey(name: frame.name, module: frame.module)
      if let id = ids[key] {
        functionOfFrame.append(id)
      } else {
        let id = Int32(functions.count)
        ids[key] = id
        functions.append(
          ProfileFunction(
            name: frame.name, module: frame.module, isApp: frame.isApp, file: frame.file, line: frame.line))
        functionOfFrame.append(id)
      }
    }
    // Pseudo functions always get their own ids, even if a frame happens to share the name,
    // so they can never be mistaken for app code.
    systemLibrariesID = Int32(functions.count)
    functions.append(.systemLibraries)
    unknownID = Int32(functions.count)
    functions.append(.unknown)
    self.functions = functions
    self.functionOfFrame = functionOfFrame
    self.isApp = functions.map(\.isApp)
    self.occurrences = Array(repeating: 0, count: functions.count)
  }

  /// Writes the display path of `stack` (root first, or leaf first if inverted) into `path`.
  /// The result is never empty: a sample always lands somewhere, so totals add up.
  mutating func transform(_ stack: [Int], into path: inout [Int32]) {
    path.removeAll(keepingCapacity: true)
    let frameCount = functionOfFrame.count
    for frame in stack {
      let id = frame >= 0 && frame < frameCount ? functionOfFrame[frame] : unknownID
      if options.hideSystemLibraries && !isApp[Int(id)] { continue }
      path.append(id)
    }
    if path.isEmpty {
      path.append(options.hideSystemLibraries && !stack.isEmpty ? systemLibrariesID : unknownID)
    }
    if options.flattenRecursion { collapseRepeats(&path) }
    if options.invert { path.reverse() }
  }

  /// Flatten Recursion as repeat removal: walking root to leaf, whenever the path ends with
  /// a block of frames immediately repeated (X X, X one or more functions) the second copy is
  /// dropped, until no such repeat is left. So direct recursion collapses (A→B→B→B→C ⇒ A→B→C)
  /// and so does mutual recursion (A→B→A→B→C ⇒ A→B→C), while a function reached again through
  /// other work stays (A→B→C→B→D is unchanged): no function ever disappears from a stack, so
  /// Top Functions totals and the leaf (self time) are the same flattened or not.
  /// Runs after Hide System Libraries, so system frames between recursive app frames
  /// (a closure called through `Array.map`) do not hide the recursion.
  private mutating func collapseRepeats(_ path: inout [Int32]) {
    scratch.removeAll(keepingCapacity: true)
    for id in path {
      scratch.append(id)
      occurrences[Int(id)] += 1
      // Only a function already on the path can close a repeat; this keeps non-recursive
      // stacks O(depth).
      var removed = true
      while removed, occurrences[Int(scratch[scratch.count - 1])] > 1 {
        removed = false
        let count = scratch.count
        var length = 1
        while length * 2 <= count {
          if scratch[(count - 2 * length)..<(count - length)] == scratch[(count - length)...] {
            for dropped in scratch[(count - length)...] { occurrences[Int(dropped)] -= 1 }
            scratch.removeLast(length)
            removed = true
            break
          }
          length += 1
        }
      }
    }
    for id in scratch { occurrences[Int(id)] = 0 }
    swap(&path, &scratch)
  }
}

private struct FunctionKey: Hashable {
  var name: String
  var module: String
}
