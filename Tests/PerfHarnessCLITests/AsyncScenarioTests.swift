import Foundation
import PerfHarness
import Testing

/// Scenarios whose bodies await: Swift concurrency runs as in an app, and the run ends when
/// the body's task does.
@Suite("Async scenarios")
struct AsyncScenarioTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  @Test(
    "an async body's steps, marks and the objects its child tasks made are recorded",
    arguments: [[], ["--in-process"]])
  func asyncWork(extra: [String]) throws {
    let (result, report) = try fixtures.runScenario("async-work", ["--iterations", "6"] + extra)
    #expect(result.status == 0, "\(result.standardError)")
    #expect(report.status == .passed, "\(report.error ?? "")")
    #expect(report.steps.map(\.name) == ["task group"])
    #expect(report.marks.map(\.label) == ["after the group"])
    // 6 child tasks x 25 objects, made on the cooperative pool's threads, all kept.
    let objects = try #require(report.allocations?.category(named: "perfharness_fixtures.AsyncFixtureObject"))
    #expect(objects.persistentCount == 150)
    #expect(objects.transientCount == 0)
  }

  @Test("an error thrown after an await ends the run as a thrown error does")
  func asyncThrows() throws {
    let (result, report) = try fixtures.runScenario("async-throws")
    #expect(result.status == 3)
    #expect(report.status == .crashed)
    #expect(
      report.error?.contains("the scenario threw: the fixture failed on purpose") == true, "\(report.error ?? "")")
    #expect(report.crash == nil)
  }
}
