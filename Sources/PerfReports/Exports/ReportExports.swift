import Foundation
import PerfHarness

/// The files a report is exported to beside `report.json` and `report.html`, in one list:
/// the report folder a run writes and `perfharness report --export DIR` both write from it,
/// so a new exporter is added here only.
public struct ReportExport: Sendable {
  /// Which tools read it.
  public enum Kind: String, Sendable, CaseIterable {
    case folded, speedscope, pprof, dot
  }

  public var kind: Kind
  /// The files it makes from `report` (name and contents), none when the report lacks what
  /// it exports.
  public var files: @Sendable (Report) throws -> [(name: String, contents: Data)]

  public static let all: [ReportExport] = [
    ReportExport(kind: .dot) { report in
      (report.leaks?.cycles ?? []).enumerated().map { index, cycle in
        ("leak-cycle-\(index + 1).dot", Data(cycle.dot(title: "cycle \(index + 1) (x\(cycle.instances))").utf8))
      }
    },
    ReportExport(kind: .folded) { report in
      guard let profile = report.timeProfile?.profile else { return [] }
      return [("profile.folded", Data(FoldedStacks.render(profile).utf8))]
    },
    ReportExport(kind: .speedscope) { report in
      guard let profile = report.timeProfile?.profile else { return [] }
      return [
        (
          "profile.speedscope.json",
          try Speedscope.render(profile, name: "\(report.scenario.name) [\(report.scenario.variant)]")
        )
      ]
    },
    ReportExport(kind: .pprof) { report in
      guard let profile = report.timeProfile?.profile else { return [] }
      return [("profile.pb.gz", Pprof.cpuProfile(profile))]
    },
    ReportExport(kind: .folded) { report in
      // Allocation stacks exist (as for heap.pb.gz): without them there is nothing to fold.
      guard let allocations = report.allocations, allocations.persistentStacks != nil else { return [] }
      return [("allocations.folded", Data(AllocationsFolded.render(allocations).utf8))]
    },
    ReportExport(kind: .pprof) { report in
      guard let heap = report.allocations.flatMap(Pprof.heapProfile) else { return [] }
      return [("heap.pb.gz", heap)]
    },
  ]
}
