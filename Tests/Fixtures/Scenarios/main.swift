// Scenarios that go wrong on purpose, for the end-to-end robustness tests.
import Foundation
import PerfHarness
import PerfHarnessCLI

struct ScenarioFailure: Error, CustomStringConvertible {
  var description: String { "the fixture failed on purpose" }
}

@inline(never)
func crashWithNullDereference() {
  let pointer = UnsafeMutablePointer<Int>(bitPattern: 8)!
  pointer.pointee = 42
}

let scenarios = [
  Scenario("fatal-error", summary: "calls fatalError after one step", variants: [.starter], defaultIterations: 1) {
    context in
    context.step("before the crash") { _ = (0..<1000).map { $0 * 2 } }
    fatalError("the fixture crashed on purpose")
  },
  Scenario("segfault", summary: "writes through a bad pointer", variants: [.starter], defaultIterations: 1) { _ in
    crashWithNullDereference()
  },
  Scenario("abort", summary: "calls abort()", variants: [.starter], defaultIterations: 1) { _ in
    abort()
  },
  Scenario("hang", summary: "never returns", variants: [.starter], defaultIterations: 1) { _ in
    while true { sleep(1) }
  },
  Scenario("throws", summary: "throws an error", variants: [.starter], defaultIterations: 1) { _ in
    throw ScenarioFailure()
  },
  Scenario("completes", summary: "does a little work", variants: [.starter], defaultIterations: 1) { context in
    context.step("work") { _ = (0..<1000).map { $0 * 2 } }
  },
]

PerfHarnessCLI.main(scenarios: scenarios)
