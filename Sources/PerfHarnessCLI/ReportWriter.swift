import Foundation
import PerfHarness
import PerfReports

/// Writes a run's files under the output directory.
struct ReportWriter {
  var directory: String

  /// - Returns: the path of the JSON report.
  func write(_ report: Report) throws -> String {
    let folder = URL(fileURLWithPath: directory)
      .appendingPathComponent(report.scenario.name)
      .appendingPathComponent(report.scenario.variant)
    let file = folder.appendingPathComponent("report.json")
    do {
      try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
      try ReportJSON.encode(report).write(to: file, options: .atomic)
      try Data(HTMLReport.render(report).utf8).write(
        to: folder.appendingPathComponent("report.html"), options: .atomic)
      for (index, cycle) in (report.leaks?.cycles ?? []).enumerated() {
        try Data(cycle.dot(title: "cycle \(index + 1) (x\(cycle.instances))").utf8).write(
          to: folder.appendingPathComponent("leak-cycle-\(index + 1).dot"), options: .atomic)
      }
      if let profile = report.timeProfile?.profile {
        try Data(FoldedStacks.render(profile).utf8).write(
          to: folder.appendingPathComponent("profile.folded"), options: .atomic)
        try Speedscope.render(profile, name: "\(report.scenario.name) [\(report.scenario.variant)]").write(
          to: folder.appendingPathComponent("profile.speedscope.json"), options: .atomic)
        try Pprof.cpuProfile(profile).write(to: folder.appendingPathComponent("profile.pb.gz"), options: .atomic)
      }
      if let allocations = report.allocations, let heap = Pprof.heapProfile(allocations) {
        try Data(AllocationsFolded.render(allocations).utf8).write(
          to: folder.appendingPathComponent("allocations.folded"), options: .atomic)
        try heap.write(to: folder.appendingPathComponent("heap.pb.gz"), options: .atomic)
      }
    } catch {
      throw HarnessError(
        "cannot write the report to \(file.path): \(error.localizedDescription); pass a writable directory with --output"
      )
    }
    return file.path
  }
}

/// A harness failure that is not the user's input: exit code 1 with a message.
struct HarnessError: Error, CustomStringConvertible {
  var description: String
  init(_ description: String) { self.description = description }
}
