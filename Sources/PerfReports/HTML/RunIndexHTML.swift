import Foundation
import PerfHarness

/// `index.html` of a run's output folder: one row per scenario run, its verdict and findings,
/// linked to its report. Static HTML without script, so it opens anywhere, a CI artifact
/// browser included.
public enum RunIndexHTML {
  /// - Parameter reports: each report and its folder relative to the index (`<scenario>/<variant>`).
  public static func render(_ reports: [(report: Report, folder: String)]) -> String {
    let rows = reports.map { entry in
      let report = entry.report
      let folder = entry.folder.split(separator: "/").map {
        String($0).addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? String($0)
      }.joined(separator: "/")
      let found = findingsHTML(Findings.of(report))
      return """
        <tr data-scenario="\(escape(report.scenario.name))"><td><a href="\(folder)/report.html">\(escape(report.scenario.name))</a></td>\
        <td>\(escape(report.scenario.variant))</td>\
        <td><span class="badge \(report.verdict.replacingOccurrences(of: " ", with: "-"))">\(escape(report.verdict))</span></td>\
        <td>\(found)</td><td><a href="\(folder)/report.json">report.json</a></td></tr>
        """
    }
    return """
      <!DOCTYPE html>
      <html lang="en">
      <head>
      <meta charset="utf-8">
      <meta name="generator" content="perfharness \(PerfHarnessVersion.current)">
      <title>perfharness run</title>
      <style>
      \(styles)
      </style>
      </head>
      <body>
      <h1>perfharness run</h1>
      <table id="runs"><thead><tr><th>Scenario</th><th>Variant</th><th>Status</th><th>Findings</th><th>Data</th></tr></thead>
      <tbody>
      \(rows.joined(separator: "\n"))
      </tbody></table>
      </body>
      </html>

      """
  }

  /// The findings the scenario's own page opens with, in its order, what to act on marked:
  /// only the problems left the tutorial's CPU finding (the heaviest program function on the
  /// main thread) out, and the row read "nothing to act on" above a report leading with it.
  static func findingsHTML(_ findings: [Finding]) -> String {
    guard !findings.isEmpty else { return "<span class=\"muted\">no findings</span>" }
    let items = findings.map { finding in
      "<li class=\"\(finding.isProblem ? "problem" : "finding")\" data-kind=\"\(escape(finding.kind))\">"
        + "<span class=\"kind\">\(escape(finding.kind))</span> \(escape(finding.summary))</li>"
    }
    return "<ul class=\"findings\">\(items.joined())</ul>"
  }

  /// The index's CSS, `Resources/run-index.css`.
  static let styles = HTMLAsset.inlined(PackageResources.run_index_css)

  static func escape(_ text: String) -> String {
    var out = ""
    for character in text {
      switch character {
      case "&": out += "&amp;"
      case "<": out += "&lt;"
      case ">": out += "&gt;"
      case "\"": out += "&quot;"
      case "'": out += "&#39;"
      default: out.append(character)
      }
    }
    return out
  }
}
