// swift-tools-version:6.0
import PackageDescription

let package = Package(
  name: "perfharness",
  platforms: [.macOS(.v14)],
  products: [
    .executable(name: "perfharness", targets: ["perfharness"]),
    // What a user's own package depends on to declare scenarios and get the same CLI.
    .library(name: "PerfHarness", targets: ["PerfHarness", "PerfReports", "PerfHarnessCLI"]),
    .library(name: "PhotoSearch", targets: ["PhotoSearch"]),
    // What `perfharness record -- CMD` preloads into an unmodified program (LD_PRELOAD):
    // the same recorder, as a shared library.
    .library(name: "PerfHarnessPreload", type: .dynamic, targets: ["PerfHarnessPreload"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
    .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
    .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
    // The user guide (Sources/PerfHarness/PerfHarness.docc):
    // `swift package generate-documentation --target PerfHarness`. A command plugin: nothing
    // of it is built unless that command runs.
    .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
  ],
  targets: [
    // C primitives: only what must be C (signal handler, unwinding, libdw access).
    .target(
      name: "CPerfSampler",
      dependencies: ["CPerfSupport", "CPerfAlloc"],
      cSettings: [.define("_GNU_SOURCE")],
      // gcc_s before unwind: libunwind must not replace libgcc_s's _Unwind_* for the
      // whole process (docs/design.md, "Linking"). libdw reads CFI rows' ranges off the handler.
      linkerSettings: [.linkedLibrary("gcc_s"), .linkedLibrary("unwind"), .linkedLibrary("dw"), .linkedLibrary("elf")]
    ),
    // The malloc-family interposer and the Swift allocation hook: linked into the
    // executable, they see every library's allocations without LD_PRELOAD.
    .target(name: "CPerfAlloc", dependencies: ["CPerfSupport"], cSettings: [.define("_GNU_SOURCE")]),
    // What every C recorder shares: the TSC calibrated against CLOCK_MONOTONIC, one error
    // type, a malloc-free reader of /proc/self/maps, signal chaining, a spinlock.
    .target(name: "CPerfSupport", cSettings: [.define("_GNU_SOURCE")]),
    // The leaks instrument's conservative heap-graph scanner (roots, thread parking).
    .target(name: "CPerfHeapScan", dependencies: ["CPerfSupport"], cSettings: [.define("_GNU_SOURCE")]),
    // The scenario child's crash handler: a dying scenario still hands over its partial report.
    .target(name: "CPerfCrash", cSettings: [.define("_GNU_SOURCE")]),
    // The preloaded recorder's constructor, destructor and generation marks (a timer,
    // SIGUSR2, the program's own perfharness_mark call).
    .target(name: "CPerfPreload", dependencies: ["CPerfSampler", "CPerfCrash"], cSettings: [.define("_GNU_SOURCE")]),
    .target(
      name: "CPerfSymbols",
      cSettings: [.define("_GNU_SOURCE")],
      linkerSettings: [.linkedLibrary("dw"), .linkedLibrary("elf")]
    ),

    // The recorder, symbolizer, analyses and the public scenario API.
    .target(
      name: "PerfHarness",
      dependencies: [
        "CPerfSupport", "CPerfSampler", "CPerfSymbols", "CPerfAlloc", "CPerfHeapScan",
        .product(name: "Yams", package: "Yams"),
      ]),
    // Text, JSON, HTML and export renderers. The HTML pages' CSS, JavaScript and skeleton are
    // files, compiled in as bytes (`PackageResources`): no resource bundle to ship or find.
    .target(
      name: "PerfReports", dependencies: ["PerfHarness", .product(name: "Mustache", package: "swift-mustache")],
      exclude: ["Schema"], resources: [.embedInCode("HTML/Resources")]),
    // The recorder of `perfharness record`, built into libPerfHarnessPreload.so.
    .target(name: "PerfHarnessPreload", dependencies: ["PerfHarness", "PerfReports", "CPerfPreload"]),
    // The command line, as a library so a user's own executable gets the same CLI.
    .target(
      name: "PerfHarnessCLI",
      dependencies: [
        "PerfHarness", "PerfReports", "CPerfCrash",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ]
    ),
    .executableTarget(name: "perfharness", dependencies: ["PerfHarnessCLI", "Scenarios"]),
    // `make bench`: overhead figures against their targets.
    .executableTarget(
      name: "perfharness-bench", dependencies: ["PerfHarness", "PerfReports", "PerfBenchSupport", "BenchWorkloads"]),
    // What the bench measures reports with (a synthetic large report, render and browser
    // timings), shared with the tests that check it; in no product.
    .target(name: "PerfBenchSupport", dependencies: ["PerfHarness", "PerfReports"]),
    .target(name: "BenchWorkloads"),
    // What a timer interrupt and a signal cost here before any profiler's work (C: a
    // signal handler and perf_event_open, a variadic system call Swift cannot call).
    .target(name: "CBenchSampling", cSettings: [.define("_GNU_SOURCE")]),
    .executableTarget(name: "bench-workload", dependencies: ["BenchWorkloads"]),
    .executableTarget(name: "bench-sampling-floor", dependencies: ["CBenchSampling"]),
    // Scenarios that crash or hang, for the robustness tests.
    .executableTarget(
      name: "perfharness-fixtures", dependencies: ["PerfHarnessCLI", "PerfHarness", "AsyncChainCases"],
      path: "Tests/Fixtures/Scenarios"),
    // The leaks corpus: shared by the in-process tests and an executable that runs each
    // case as a scenario (built in release by `make test`, checked by a test).
    .target(name: "LeakCorpusCases", path: "Tests/Fixtures/LeakCorpusCases"),
    // `make leak-corpus`: each shape of the corpus run many times, found/expected per shape.
    .executableTarget(
      name: "perfharness-leak-corpus-runner", dependencies: ["PerfHarness", "LeakCorpusCases"],
      path: "Tests/Fixtures/LeakCorpusRunner"),
    // Threads in the states the leak scan must read right (a word left in a red zone).
    .target(name: "HeapScanCases", path: "Tests/Fixtures/HeapScanCases"),
    // Code the sampler's unwinder must handle as libunwind does (a leaf without an FDE).
    .target(name: "UnwindCases", path: "Tests/Fixtures/UnwindCases"),
    // An async call chain for the sampler's logical chains (a scenario and a recorded program).
    .target(name: "AsyncChainCases", path: "Tests/Fixtures/AsyncChainCases"),
    .executableTarget(
      name: "perfharness-leak-corpus", dependencies: ["PerfHarnessCLI", "PerfHarness", "LeakCorpusCases"],
      path: "Tests/Fixtures/LeakCorpus"),
    // The README's example of a user's own scenarios, on the public API only.
    .executableTarget(
      name: "perfharness-example", dependencies: ["PerfHarnessCLI", "PerfHarness"],
      path: "Examples/CustomScenarios"),
    // The recorder under stress (16 allocating threads, threads coming and going, a fork, a
    // thread blocking SIGPROF), run in a child process so a deadlock fails by timeout.
    .executableTarget(
      name: "perfharness-stress", dependencies: ["PerfHarnessCLI", "PerfHarness"], path: "Tests/Fixtures/Stress"),
    // The sample app's observable outputs, plain and under the instruments: measuring must
    // change nothing.
    .executableTarget(
      name: "photosearch-outputs", dependencies: ["PerfHarnessCLI", "PerfHarness", "PhotoSearch"],
      path: "Tests/Fixtures/PhotoSearchOutputs"),

    // Programs that know nothing of perfharness, for `perfharness record`'s tests.
    .executableTarget(
      name: "record-target-swift", dependencies: ["LeakCorpusCases", "AsyncChainCases"],
      path: "Tests/Fixtures/RecordTargetSwift"),
    .executableTarget(name: "record-target-c", path: "Tests/Fixtures/RecordTargetC"),

    // The sample app (a headless model of the Instruments tutorial's app) and its scenarios.
    .target(name: "PhotoSearch"),
    .target(
      name: "Scenarios", dependencies: ["PerfHarness", "PhotoSearch"], path: "Scenarios", exclude: ["thresholds"]),

    .testTarget(name: "PhotoSearchTests", dependencies: ["PhotoSearch"]),
    .testTarget(
      name: "PerfHarnessTests",
      dependencies: [
        "PerfHarness", "LeakCorpusCases", "UnwindCases", "HeapScanCases", "BenchWorkloads",
        .product(name: "PropertyBased", package: "swift-property-based"),
      ]),
    .testTarget(name: "PerfReportsTests", dependencies: ["PerfReports", "PerfBenchSupport"]),
    .testTarget(
      name: "PerfHarnessCLITests",
      dependencies: [
        "PerfHarnessCLI", "PerfBenchSupport", "LeakCorpusCases",
        .product(name: "PropertyBased", package: "swift-property-based"),
      ]),
  ]
)
