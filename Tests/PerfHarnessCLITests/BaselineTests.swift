import Foundation
import PerfHarness
import Testing

/// `--baseline` and `perfharness compare`: a run held against a stored report.
@Suite("Baselines and compare")
struct BaselineTests {
  let perfharness = try! BuiltBinary("perfharness")

  /// Runs closure-retain-cycles once per variant into one folder: the fixed run is the
  /// baseline the other runs are held against.
  private func record(_ variant: String, into directory: URL, extra: [String] = []) throws -> BuiltBinary.Result {
    try perfharness.run(
      [
        "scenario", "closure-retain-cycles", "--variant", variant, "--iterations", "3", "--instruments",
        "allocations", "--format", "json", "--output", directory.path,
      ] + extra)
  }

  private func report(in directory: URL, variant: String) throws -> Report {
    let file = directory.appendingPathComponent("closure-retain-cycles/\(variant)/report.json")
    return try JSONDecoder().decode(Report.self, from: Data(contentsOf: file))
  }

  @Test("a starter run against a fixed baseline fails on the screens that now persist; fixed against fixed passes")
  func scenarioBaseline() throws {
    let base = try temporaryDirectory()
    let runs = try temporaryDirectory()
    defer {
      try? FileManager.default.removeItem(at: base)
      try? FileManager.default.removeItem(at: runs)
    }
    #expect(try record("fixed", into: base).status == 0)
    let baselineFile = base.appendingPathComponent("closure-retain-cycles/fixed/report.json").path

    let again = try record("fixed", into: runs, extra: ["--baseline", base.path])
    let rerun = try report(in: runs, variant: "fixed")
    // What failed, if anything: the rows say which figure and by how much.
    let failedRows = (rerun.comparison?.rows ?? []).filter { !$0.passed }.map {
      "\($0.metric): \($0.baseline.map { String($0) } ?? "-") -> \($0.current.map { String($0) } ?? "-") (\($0.detail ?? ""))"
    }
    #expect(again.status == 0, "\(failedRows) \(again.standardError.prefix(2000))")
    #expect(rerun.comparison?.passed == true, "\(failedRows)")
    #expect(rerun.comparison?.baseline == baselineFile)

    // Another variant runs other code: refused before it runs, unless that is intended.
    let refused = try record("starter", into: runs, extra: ["--baseline", baselineFile])
    #expect(refused.status == 64, "\(refused.standardError)")
    for part in [baselineFile, "variant fixed (this run: starter)", "--allow-different-setup"] {
      #expect(refused.standardError.contains(part), "\(part): \(refused.standardError)")
    }
    #expect(!FileManager.default.fileExists(atPath: runs.appendingPathComponent("closure-retain-cycles/starter").path))
    let starter = try record("starter", into: runs, extra: ["--baseline", baselineFile, "--allow-different-setup"])
    #expect(starter.status == 2)
    let comparison = try #require(try report(in: runs, variant: "starter").comparison)
    #expect(!comparison.passed)
    let failed = comparison.rows.filter { !$0.passed }.map(\.metric)
    #expect(failed.contains("# Persistent PhotoSearch.SearchResultsViewController"), "\(failed)")
    #expect(failed.contains("persistent bytes"), "\(failed)")
  }

  @Test("compare prints the table and exits 2 on a regression, 0 without one")
  func compareCommand() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let second = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: second) }
    _ = try record("fixed", into: directory)
    _ = try record("starter", into: directory)
    _ = try record("fixed", into: second)
    let fixed = directory.appendingPathComponent("closure-retain-cycles/fixed/report.json").path
    let starter = directory.appendingPathComponent("closure-retain-cycles/starter/report.json").path
    let fixedAgain = second.appendingPathComponent("closure-retain-cycles/fixed/report.json").path

    let refused = try perfharness.run(["compare", fixed, starter])
    #expect(refused.status == 64)
    #expect(
      refused.standardError.contains(
        "compare \(fixed) was recorded with another setup: variant fixed (\(starter): starter)"),
      "\(refused.standardError)")
    let regression = try perfharness.run(["compare", fixed, starter, "--allow-different-setup"])
    #expect(regression.status == 2)
    #expect(regression.standardOutput.contains("variant: starter (baseline: fixed)"))
    #expect(regression.standardOutput.contains("FAIL # Persistent PhotoSearch.SearchResultsViewController"))

    let same = try perfharness.run(["compare", fixed, fixedAgain, "--format", "json"])
    #expect(same.status == 0, "\(same.standardOutput)")
    let comparison = try JSONDecoder().decode(BaselineComparison.self, from: Data(same.standardOutput.utf8))
    #expect(comparison.passed && comparison.baseline == fixed)
  }

  @Test(
    "bad input names the input and the accepted forms",
    arguments: [
      (["compare", "/nonexistent/base.json", "/nonexistent/new.json"], Int32(1), "cannot read the report"),
      (["compare", "a.json", "b.json", "--tolerance=-5"], Int32(64), "accepted: a number >= 0"),
      (["compare", "a.json", "b.json", "--peak-tolerance", "nan"], Int32(64), "--peak-tolerance 'nan'"),
      (["compare", "a.json", "b.json", "--min-increase", "lots"], Int32(64), "accepted: a number followed by"),
      (
        ["scenario", "closure-retain-cycles", "--baseline", "/nonexistent"], Int32(64),
        "accepted: a report.json, or a folder"
      ),
    ])
  func badInput(arguments: [String], status: Int32, message: String) throws {
    let result = try perfharness.run(arguments)
    #expect(result.status == status)
    #expect(result.standardError.contains(message), "\(result.standardError)")
  }

  @Test("a baseline of another scenario is refused before anything runs")
  func otherScenario() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    _ = try record("fixed", into: directory)
    let file = directory.appendingPathComponent("closure-retain-cycles/fixed/report.json").path
    let result = try perfharness.run(["scenario", "search-drill-downs", "--baseline", file])
    #expect(result.status == 64)
    #expect(
      result.standardError.contains("scenario closure-retain-cycles (this run: search-drill-downs)"),
      "\(result.standardError)")
    #expect(result.standardError.contains("a folder of <scenario>/<variant>/report.json"))
    let compare = try perfharness.run(["compare", file, file, "--time-tolerance", "0", "--peak-tolerance", "0"])
    #expect(compare.status == 0, "a report equals itself, times and peak included")
    #expect(compare.standardOutput.contains("ok   peak heap"), "\(compare.standardOutput)")
  }

  /// Reports of two fixtures differ in scenario and iterations: compare said exit 1, a
  /// harness error, for what is a usage error.
  @Test("compare refuses reports set up otherwise (exit 64) and, allowed, names each difference in a row")
  func compareOtherSetup() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let fixtures = try BuiltBinary("perfharness-fixtures")
    for scenario in ["completes", "prints"] {
      let run = try fixtures.run(["scenario", scenario, "--instruments", "none", "--output", directory.path])
      #expect(run.status == 0, "\(run.standardError)")
    }
    let completes = directory.appendingPathComponent("completes/starter/report.json").path
    let prints = directory.appendingPathComponent("prints/starter/report.json").path
    let refused = try perfharness.run(["compare", completes, prints])
    #expect(refused.status == 64)
    for part in ["scenario completes (\(prints): prints)", "iterations 1 (\(prints): 3)", "--allow-different-setup"] {
      #expect(refused.standardError.contains(part), "\(part): \(refused.standardError)")
    }
    let allowed = try perfharness.run(["compare", completes, prints, "--allow-different-setup", "--format", "json"])
    #expect(allowed.status == 0, "\(allowed.standardError)")
    let comparison = try JSONDecoder().decode(BaselineComparison.self, from: Data(allowed.standardOutput.utf8))
    #expect(
      comparison.rows.filter { $0.unit == "setup" }.map(\.metric) == [
        "scenario: prints (baseline: completes)", "iterations: 3 (baseline: 1)",
      ])
    // Another instrument set is refused the same way, before the run.
    let instruments = try fixtures.run([
      "scenario", "completes", "--instruments", "allocations", "--baseline", completes, "--output",
      directory.appendingPathComponent("again").path,
    ])
    #expect(instruments.status == 64)
    #expect(
      instruments.standardError.contains("instruments none (this run: allocations)"), "\(instruments.standardError)")
  }

  /// With its allocations section removed, a baseline passed every memory gate: "no regression".
  @Test("a baseline without a section: its figures are not gated, the comparison says so; asked for by name, exit 64")
  func baselineWithoutASection() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    #expect(try record("starter", into: directory).status == 0)
    let file = directory.appendingPathComponent("closure-retain-cycles/starter/report.json")
    var json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])
    json["allocations"] = nil
    let edited = directory.appendingPathComponent("without-allocations.json")
    try JSONSerialization.data(withJSONObject: json).write(to: edited)

    let result = try perfharness.run(["compare", edited.path, file.path])
    #expect(result.status == 0, "\(result.standardError)")
    let text = result.standardOutput
    #expect(text.contains("allocations: not in the baseline"), "\(text)")
    #expect(text.contains("the baseline has no allocations section: persistent bytes and blocks"), "\(text)")
    let persistent = try #require(text.split(separator: "\n").first { $0.contains("persistent bytes  ") })
    #expect(persistent.contains("the baseline has no such figure (not gated)"), "\(persistent)")
    #expect(!persistent.contains("ok "), "an unjudged figure is not marked as passing: \(persistent)")

    let peak = try perfharness.run(["compare", edited.path, file.path, "--peak-tolerance", "10"])
    #expect(peak.status == 64)
    #expect(
      peak.standardError.contains(
        "compare \(edited.path) cannot serve the gates asked for: --peak-tolerance gates the peak heap, and the baseline has no allocations section"
      ), "\(peak.standardError)")
  }

  @Test("the report of a run that crashed is refused as a baseline (exit 64, with the reason)")
  func crashedBaseline() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let fixtures = try BuiltBinary("perfharness-fixtures")
    let crashed = try fixtures.run(["scenario", "abort", "--output", directory.path])
    #expect(crashed.status == 3)
    let file = directory.appendingPathComponent("abort/starter/report.json").path
    let compare = try fixtures.run(["compare", file, file])
    #expect(compare.status == 64)
    #expect(compare.standardError.contains("a run that crashed"), "\(compare.standardError)")
    let scenario = try fixtures.run(["scenario", "abort", "--baseline", file, "--output", directory.path])
    #expect(scenario.status == 64)
    #expect(scenario.standardError.contains("a run that crashed"), "\(scenario.standardError)")
  }

  /// A baseline whose recorder lost blocks reads low on every figure it lacks.
  @Test("the report of a run that lost data is refused as a baseline (exit 64, naming the loss)")
  func partialBaseline() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let run = try perfharness.run([
      "scenario", "search-drill-downs", "--variant", "fixed", "--iterations", "2", "--instruments", "allocations",
      "--output", directory.path,
    ])
    #expect(run.status == 0, "\(run.standardError)")
    let file = directory.appendingPathComponent("search-drill-downs/fixed/report.json")
    var json = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [String: Any])
    var allocations = try #require(json["allocations"] as? [String: Any])
    var lost = try #require(allocations["lost"] as? [String: Any])
    lost["blocks"] = 5
    allocations["lost"] = lost
    json["allocations"] = allocations
    let partial = directory.appendingPathComponent("partial.json")
    try JSONSerialization.data(withJSONObject: json).write(to: partial)
    let compare = try perfharness.run(["compare", partial.path, file.path])
    #expect(compare.status == 64)
    #expect(
      compare.standardError.contains("lost data (lost-allocation-records: 5 blocks not tracked"),
      "\(compare.standardError)")
  }
}
