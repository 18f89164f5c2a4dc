// swift-tools-version:6.0
import PackageDescription

// A real server for the end-to-end test of `perfharness record` (Tests/PerfHarnessCLITests/
// ServerRecordTests.swift): a Hummingbird 2 app whose route leaks one retain cycle per
// request. Its own package, so perfharness does not depend on Hummingbird; `make test`
// builds it (`make server-fixture`) into .build/server-fixture.
let package = Package(
  name: "LeakingServer",
  platforms: [.macOS(.v14)],
  dependencies: [
    .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1")
  ],
  targets: [
    .executableTarget(
      name: "leaking-server",
      dependencies: [.product(name: "Hummingbird", package: "hummingbird")],
      path: "Sources/LeakingServer")
  ]
)
