import Foundation
import Testing

@testable import PerfHarness

/// Builds a profile from stacks written as function names, root first. Names starting with
/// `sys_` belong to `libc.so.6` (system), the rest to `App`.
private func makeProfile(
  _ stacks: [(thread: Int, weight: Double, names: [String])],
  threads: [String] = ["Main Thread", "Worker"]
) -> Profile {
  var frames: [ProfileFrame] = []
  var index: [String: Int] = [:]
  func frame(_ name: String) -> Int {
    if let existing = index[name] { return existing }
    let isSystem = name.hasPrefix("sys_")
    frames.append(
      ProfileFrame(
        name: name, module: isSystem ? "libc.so.6" : "App", isApp: !isSystem, file: isSystem ? nil : "App.swift",
        line: frames.count + 1))
    index[name] = frames.count - 1
    return frames.count - 1
  }
  let samples = stacks.map { ProfileSample(thread: $0.thread, weight: $0.weight, stack: $0.names.map(frame)) }
  return Profile(
    frames: frames,
    threads: threads.enumerated().map {
      ProfileThread(name: $0.element, isMain: $0.offset == 0, threadID: Int32(100 + $0.offset))
    },
    samples: samples)
}

private func sample(_ names: String, weight: Double = 1, thread: Int = 0) -> (
  thread: Int, weight: Double, names: [String]
) {
  (thread, weight, names.split(separator: ">").map(String.init))
}

extension CallTreeNode {
  fileprivate func child(_ name: String) -> CallTreeNode? { children.first { $0.name == name } }
  /// The chain of first children, as names: handy to pin down single-path trees.
  fileprivate var chain: [String] { [name] + (children.first?.chain ?? []) }
}

extension CallTree {
  fileprivate func root(_ name: String) -> CallTreeNode? { roots.first { $0.name == name } }
}

@Suite struct CallTreeTests {
  @Test func topFunctionsSelfPercentagesFollowLeafWeights() {
    let profile = makeProfile([
      sample("main>a", weight: 50), sample("main>b", weight: 30), sample("main>c", weight: 20),
    ])
    let top = profile.topFunctions(hideSystemLibraries: false)
    #expect(top.map(\.symbol) == ["a", "b", "c", "main"])
    #expect(top.map(\.selfPercent) == [50, 30, 20, 0])
    #expect(top.last?.totalPercent == 100)
    #expect(profile.topFunctions(hideSystemLibraries: false, limit: 2).map(\.symbol) == ["a", "b"])
  }

  @Test func plainTreeAggregatesByFunctionNotFrame() {
    // Two frames of `work` on different lines are one function.
    var profile = makeProfile([sample("main>work", weight: 2)])
    profile.frames.append(ProfileFrame(name: "work", module: "App", isApp: true, file: "App.swift", line: 99))
    profile.samples.append(ProfileSample(thread: 0, weight: 3, stack: [0, 2]))
    let tree = CallTree(profile: profile, options: .init())
    #expect(tree.roots.count == 1)
    #expect(tree.roots[0].children.count == 1)
    #expect(tree.roots[0].children[0].totalWeight == 5)
    #expect(tree.roots[0].children[0].line == 2)
    #expect(tree.roots[0].children[0].sampleCount == 2)
  }

  @Test func mergedSamplesCountAsTheSamplesTheyStandFor() throws {
    // Identical stacks are stored once with their count: every count is of samples.
    var profile = makeProfile([sample("main>work", weight: 2)])
    profile.samples[0].count = 3
    profile.samples.append(ProfileSample(thread: 0, weight: 1, stack: [0]))
    let tree = CallTree(profile: profile, options: .init())
    #expect(tree.sampleCount == 4)
    #expect(tree.roots.first?.sampleCount == 4)
    #expect(tree.roots.first?.children.first?.sampleCount == 3)
    let top = profile.topFunctions(hideSystemLibraries: false)
    #expect(top.map(\.sampleCount) == [3, 4])
    #expect(profile.functionStacks().stacks.map(\.sampleCount) == [3, 1])
  }

  @Test func childrenAreSortedHeaviestFirst() {
    let profile = makeProfile([
      sample("main>light", weight: 1), sample("main>heavy", weight: 5), sample("main>mid", weight: 3),
    ])
    let tree = CallTree(profile: profile, options: .init())
    #expect(tree.roots[0].children.map(\.name) == ["heavy", "mid", "light"])
  }

  @Test func invertedRootsAreLeafFunctionsWithTheirSelfTime() {
    let profile = makeProfile([
      sample("main>parse>scan", weight: 4), sample("main>render>scan", weight: 2),
      sample("main>render", weight: 3), sample("main", weight: 1),
    ])
    let plain = CallTree(profile: profile, options: .init())
    let inverted = CallTree(profile: profile, options: .init(invert: true))
    var selfByFunction: [String: Double] = [:]
    func collect(_ node: CallTreeNode) {
      selfByFunction[node.name, default: 0] += node.selfWeight
      node.children.forEach(collect)
    }
    plain.roots.forEach(collect)
    let leaves = selfByFunction.filter { $0.value > 0 }
    #expect(Dictionary(uniqueKeysWithValues: inverted.roots.map { ($0.name, $0.totalWeight) }) == leaves)
    #expect(inverted.roots.allSatisfy { $0.selfWeight == $0.totalWeight })
    #expect(inverted.roots.reduce(0) { $0 + $1.totalWeight } == plain.totalWeight)
    // Callers below the leaf: scan ← parse (4), scan ← render (2).
    let scan = inverted.root("scan")
    #expect(scan?.children.map(\.name) == ["parse", "render"])
    #expect(scan?.child("parse")?.child("main")?.totalWeight == 4)
    #expect(scan?.child("parse")?.selfWeight == 0)
  }

  @Test func hideSystemLibrariesChargesTheNearestAppCaller() {
    let profile = makeProfile([
      sample("sys_start>main>decode>sys_memcpy>sys_memmove", weight: 40),
      sample("sys_start>main>decode", weight: 10),
      sample("sys_start>sys_clone", weight: 5),
    ])
    let tree = CallTree(profile: profile, options: .init(hideSystemLibraries: true))
    #expect(tree.totalWeight == 55)
    #expect(tree.roots.map(\.name) == ["main", "<system libraries>"])
    #expect(tree.root("main")?.child("decode")?.selfWeight == 50)
    #expect(tree.root("main")?.child("decode")?.children.isEmpty == true)
    #expect(tree.root("<system libraries>")?.totalWeight == 5)
    #expect(tree.root("<system libraries>")?.isApp == false)
    let top = profile.topFunctions(hideSystemLibraries: true)
    #expect(top.map(\.symbol) == ["decode", "<system libraries>", "main"])
    #expect(top[0].selfWeight == 50)
    // Without the option the system leaf keeps its time.
    let visible = profile.topFunctions(hideSystemLibraries: false)
    #expect(visible.first?.symbol == "sys_memmove")
  }

  @Test(arguments: 1...6)
  func flattenRecursionCollapsesRepeatsWhateverTheDepth(depth: Int) {
    let stack = ["A"] + Array(repeating: "B", count: depth) + ["C"]
    let profile = makeProfile([(0, 5, stack), (0, 2, ["A", "B"])])
    let tree = CallTree(profile: profile, options: .init(flattenRecursion: true))
    #expect(tree.roots.count == 1)
    #expect(tree.roots[0].chain == ["A", "B", "C"])
    #expect(tree.roots[0].totalWeight == 7)
    #expect(tree.roots[0].child("B")?.totalWeight == 7)
    #expect(tree.roots[0].child("B")?.selfWeight == 2)
    #expect(tree.roots[0].child("B")?.child("C")?.totalWeight == 5)
    #expect(tree.roots[0].child("B")?.child("C")?.selfWeight == 5)
    // Unflattened, the depth shows.
    let deep = CallTree(profile: profile, options: .init())
    #expect(deep.roots[0].chain.count == depth + 2)
  }

  @Test(arguments: [
    ("A>B>A>B>C", ["A", "B", "C"]),
    ("A>B>C>B>D", ["A", "B", "C", "B", "D"]),
    ("A>B>C>A", ["A", "B", "C", "A"]),
    ("A>B>C>B>C>D", ["A", "B", "C", "D"]),
    ("A>B>A>B>A>B>A", ["A", "B", "A"]),
    ("A>B>C>A>B>C>A>B>C>D", ["A", "B", "C", "D"]),
    ("A>A>A", ["A"]),
    ("A>B>C", ["A", "B", "C"]),
  ])
  func flattenRecursionDropsImmediateRepeats(stack: String, expected: [String]) {
    let tree = CallTree(profile: makeProfile([sample(stack, weight: 3)]), options: .init(flattenRecursion: true))
    #expect(tree.roots.count == 1)
    #expect(tree.roots[0].chain == expected)
    #expect(tree.roots[0].totalWeight == 3)
  }

  @Test func topFunctionsCountsRecursiveFunctionsOncePerSample() {
    let profile = makeProfile([sample("A>B>A>B>C", weight: 3), sample("A>D", weight: 2)])
    let top = profile.topFunctions(hideSystemLibraries: false)
    let byName = Dictionary(uniqueKeysWithValues: top.map { ($0.symbol, $0) })
    #expect(byName["A"]?.totalWeight == 5)
    #expect(byName["B"]?.totalWeight == 3)
    #expect(byName["A"]?.sampleCount == 2)
    #expect(top.reduce(0) { $0 + $1.selfWeight } == 5)

    let tree = CallTree(profile: profile, options: .init(topFunctions: true))
    #expect(tree.root("A")?.totalWeight == 5)
    #expect(tree.root("B")?.totalWeight == 3)
    #expect(tree.root("C")?.selfWeight == 3)
    #expect(tree.roots.reduce(0) { $0 + $1.selfWeight } == 5)
    // B's children come from its outermost occurrence: B>A>B>C.
    #expect(tree.root("B")?.chain == ["B", "A", "B", "C"])
    #expect(tree.root("A")?.children.map(\.name) == ["B", "D"])
    // The flat list and the tree's roots agree.
    for row in top {
      #expect(tree.root(row.symbol)?.totalWeight == row.totalWeight)
      #expect(tree.root(row.symbol)?.selfWeight == row.selfWeight)
    }
  }

  @Test func invertedTopFunctionsShowCallers() {
    let profile = makeProfile([
      sample("main>a>leaf", weight: 4), sample("main>b>leaf", weight: 1), sample("main>a", weight: 2),
    ])
    let tree = CallTree(profile: profile, options: .init(invert: true, topFunctions: true))
    #expect(tree.root("a")?.totalWeight == 6)
    #expect(tree.root("a")?.selfWeight == 2)
    #expect(tree.root("a")?.children.map(\.name) == ["main"])
    #expect(tree.root("leaf")?.children.map(\.name) == ["a", "b"])
    #expect(tree.root("main")?.selfWeight == 0)
    #expect(tree.root("main")?.children.isEmpty == true)
  }

  @Test func threadsSharingANameAreToldApartByTheirID() {
    let profile = makeProfile(
      [
        sample("main>a", weight: 3, thread: 0), sample("w>a", weight: 2, thread: 1),
        sample("w>b", weight: 1, thread: 2),
      ],
      threads: ["Main Thread", "Dispatch worker", "Dispatch worker"])
    let tree = CallTree(profile: profile, options: .init(separateByThread: true))
    #expect(tree.roots.map(\.name) == ["Main Thread", "Dispatch worker 101", "Dispatch worker 102"])
  }

  @Test func separateByThreadPutsARootPerThread() {
    let profile = makeProfile([
      sample("main>a", weight: 3, thread: 0), sample("work>a", weight: 5, thread: 1),
      sample("work>b", weight: 1, thread: 1),
    ])
    let tree = CallTree(profile: profile, options: .init(separateByThread: true))
    #expect(tree.roots.map(\.name) == ["Worker", "Main Thread"])
    #expect(tree.roots.allSatisfy { $0.kind == .thread && $0.module == "" && $0.selfWeight == 0 })
    #expect(tree.roots.map(\.totalWeight) == [6, 3])
    #expect(tree.roots[0].children.map(\.name) == ["work"])
    #expect(tree.roots[0].children[0].children.map(\.name) == ["a", "b"])
    // Merged, `a` appears under two different roots.
    let merged = CallTree(profile: profile, options: .init())
    #expect(merged.roots.map(\.name) == ["work", "main"])
    // A thread filter restricts everything, totals included.
    let worker = CallTree(profile: profile, options: .init(), threads: [1])
    #expect(worker.totalWeight == 6)
    #expect(profile.topFunctions(threads: [0], hideSystemLibraries: false).first?.selfPercent == 100)
  }

  @Test func emptyStacksAndBadIndicesStillCount() {
    var profile = makeProfile([sample("main", weight: 1)])
    profile.samples.append(ProfileSample(thread: 0, weight: 2, stack: []))
    profile.samples.append(ProfileSample(thread: 7, weight: 4, stack: [0, 42]))
    let tree = CallTree(profile: profile, options: .init(separateByThread: true))
    #expect(tree.totalWeight == 7)
    #expect(tree.roots.reduce(0) { $0 + $1.totalWeight } == 7)
    #expect(tree.root("Thread 7")?.children.first?.child("<unknown>")?.selfWeight == 4)
  }

  @Test func optionsParseFromTheCommandLineForm() throws {
    #expect(
      try CallTreeOptions(parsing: "invert, hide-system-libraries,top")
        == .init(invert: true, hideSystemLibraries: true, topFunctions: true))
    #expect(try CallTreeOptions(parsing: "") == .init())
    #expect(throws: CallTreeOptions.ParseError.self) { try CallTreeOptions(parsing: "invert,sideways") }
  }

  // MARK: Invariants over every option combination

  static let allOptions: [CallTreeOptions] = (0..<32).map {
    CallTreeOptions(
      separateByThread: $0 & 1 != 0, invert: $0 & 2 != 0, hideSystemLibraries: $0 & 4 != 0,
      flattenRecursion: $0 & 8 != 0, topFunctions: $0 & 16 != 0)
  }

  /// Deterministic pseudo-random stacks with recursion, system frames and three threads.
  static let randomProfile: Profile = {
    var state: UInt64 = 12345
    func next(_ bound: Int) -> Int {
      state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
      return Int(state >> 33) % bound
    }
    let names = [
      "main", "run", "parse", "scan", "eval", "sys_malloc", "sys_memcpy", "sys_start", "render", "sys_write",
    ]
    var stacks: [(thread: Int, weight: Double, names: [String])] = []
    for _ in 0..<400 {
      let depth = 1 + next(12)
      stacks.append((next(3), Double(1 + next(4)) * 0.5, (0..<depth).map { _ in names[next(names.count)] }))
    }
    return makeProfile(stacks, threads: ["Main Thread", "Worker 1", "Worker 2"])
  }()

  @Test(arguments: allOptions)
  func invariantsHoldForEveryCombination(options: CallTreeOptions) {
    let profile = Self.randomProfile
    let tree = CallTree(profile: profile, options: options)
    let total = profile.totalWeight()
    #expect(tree.totalWeight == total)
    #expect(tree.sampleCount == profile.samples.count)

    func close(_ a: Double, _ b: Double) -> Bool { abs(a - b) < 1e-9 }
    func checkSubtree(_ node: CallTreeNode, isRoot: Bool) {
      let childSum = node.children.reduce(0) { $0 + $1.totalWeight }
      if options.invert {
        #expect(node.selfWeight == (isRoot ? node.totalWeight : 0) || (isRoot && options.topFunctions))
        #expect(childSum <= node.totalWeight + 1e-9)
      } else if !(isRoot && options.topFunctions) {
        #expect(close(node.totalWeight, node.selfWeight + childSum), "\(node.name)")
      }
      #expect(zip(node.children, node.children.dropFirst()).allSatisfy { $0.totalWeight >= $1.totalWeight })
      #expect(node.sampleCount >= node.children.reduce(0) { $0 + $1.sampleCount })
      if options.hideSystemLibraries { #expect(node.isApp || node.name == "<system libraries>") }
      if options.flattenRecursion { #expect(node.children.allSatisfy { $0.name != node.name }) }
      for child in node.children { checkSubtree(child, isRoot: false) }
    }
    func checkForest(_ roots: [CallTreeNode], total: Double) {
      if options.topFunctions {
        #expect(close(roots.reduce(0) { $0 + $1.selfWeight }, total))
        #expect(roots.allSatisfy { $0.totalWeight <= total + 1e-9 })
        #expect(Set(roots.map(\.name)).count == roots.count)
      } else {
        #expect(close(roots.reduce(0) { $0 + $1.totalWeight }, total))
      }
      for root in roots { checkSubtree(root, isRoot: true) }
    }

    if options.separateByThread {
      #expect(tree.roots.count == 3)
      #expect(close(tree.roots.reduce(0) { $0 + $1.totalWeight }, total))
      for thread in tree.roots {
        #expect(thread.kind == .thread)
        checkForest(thread.children, total: thread.totalWeight)
      }
    } else {
      #expect(tree.roots.allSatisfy { $0.kind == .function })
      checkForest(tree.roots, total: total)
    }

    if options.topFunctions && !options.separateByThread {
      let list = profile.topFunctions(hideSystemLibraries: options.hideSystemLibraries)
      #expect(list.count == tree.roots.count)
      for row in list {
        #expect(close(tree.root(row.symbol)?.totalWeight ?? -1, row.totalWeight))
        #expect(close(tree.root(row.symbol)?.selfWeight ?? -1, row.selfWeight))
      }
    }
  }

  @Test func treeRoundTripsThroughJSON() throws {
    let tree = CallTree(profile: Self.randomProfile, options: .init(separateByThread: true, invert: true))
    let data = try JSONEncoder().encode(tree)
    let decoded = try JSONDecoder().decode(CallTree.self, from: data)
    #expect(decoded.roots == tree.roots)
    #expect(decoded.options == tree.options)
  }
}
