import Foundation
import Mustache
import PerfHarness

/// The HTML report: one self-contained page per run (styles, script and the report's JSON
/// inline, nothing fetched), readable offline in any browser.
///
/// The page draws everything from the embedded JSON: the run summary and checks, the call
/// tree with Instruments' Call Tree options and a flame graph, the allocations tables,
/// generations and live-heap chart, the leak cycles as graphs, and a baseline comparison when
/// the JSON has a top-level `comparison` key. Opening it with the fragment `#selftest` makes
/// the page exercise its own controls and write what it saw into `#selftest-result` (the
/// browser tests read it with `chromium --headless --dump-dom`).
public enum HTMLReport {
  /// Renders `report` as a page.
  public static func render(_ report: Report) throws -> String {
    // JSONEncoder takes seconds for 100k deep stacks; the samples go in their own compact
    // block instead, written directly (the page puts them back into the report).
    var rest = report
    let samples = report.timeProfile?.profile.samples ?? []
    rest.timeProfile?.profile.samples = []
    // A report written before `notGated` gets it from its own figures, as its findings do.
    if rest.notGated == nil, rest.wasChecked { rest.notGated = rest.ungatedFigures() }
    return try render(
      reportJSON: ReportJSON.encode(rest, pretty: false), samples: samples.isEmpty ? nil : compactSamples(samples),
      title: title(of: report), findings: Findings.of(report))
  }

  /// Renders a report's JSON as it is, keys the Swift model does not know included (a
  /// `comparison` section, say). `reportJSON` must be a JSON object; it is not validated here.
  /// - Parameters:
  ///   - reportJSON: the report, as `ReportJSON.encode` or `perfharness scenario` wrote it.
  ///   - title: the page's title (the scenario and variant).
  ///   - findings: what the page opens with (`Findings.of` the decoded report); none when nil.
  public static func render(reportJSON: Data, title: String, findings: [Finding]? = nil) throws -> String {
    try render(reportJSON: reportJSON, samples: nil, title: title, findings: findings)
  }

  private static func render(reportJSON: Data, samples: String?, title: String, findings: [Finding]?) throws
    -> String
  {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    var context: [String: Any] = [
      "title": title,
      "generator": "perfharness \(PerfHarnessVersion.current)",
      "styles": HTMLReport.styles,
      "script": HTMLReport.script,
      "data": scriptSafeJSON(reportJSON),
      "harnessModules": scriptSafeJSON(try encoder.encode(Profile.harnessModules)),
    ]
    if let findings { context["findings"] = scriptSafeJSON(try encoder.encode(findings)) }
    if let samples { context["samples"] = samples }
    return try template().render(context)
  }

  /// The profile's samples as a JSON array of `[thread, weight, [frame, ...]]` (root first),
  /// followed by the sample count when a merged sample stands for more than one, the form the
  /// page reads from its `profile-samples` block. Only numbers: nothing to escape.
  static func compactSamples(_ samples: [ProfileSample]) -> String {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(samples.count * 64)
    func append(_ value: Int) {
      if value < 0 {
        bytes.append(UInt8(ascii: "-"))
        append(-value)
        return
      }
      if value >= 10 { append(value / 10) }
      bytes.append(UInt8(ascii: "0") + UInt8(value % 10))
    }
    bytes.append(UInt8(ascii: "["))
    for (index, sample) in samples.enumerated() {
      if index > 0 { bytes.append(UInt8(ascii: ",")) }
      bytes.append(UInt8(ascii: "["))
      append(sample.thread)
      bytes.append(UInt8(ascii: ","))
      if sample.weight.isFinite {
        bytes.append(contentsOf: sample.weight.description.utf8)
      } else {
        bytes.append(UInt8(ascii: "0"))
      }
      bytes.append(contentsOf: Array(",[".utf8))
      for (position, frame) in sample.stack.enumerated() {
        if position > 0 { bytes.append(UInt8(ascii: ",")) }
        append(frame)
      }
      bytes.append(UInt8(ascii: "]"))
      if sample.sampleCount != 1 {
        bytes.append(UInt8(ascii: ","))
        append(sample.sampleCount)
      }
      bytes.append(UInt8(ascii: "]"))
    }
    bytes.append(UInt8(ascii: "]"))
    return String(decoding: bytes, as: UTF8.self)
  }

  /// The page title for `report`: `"<scenario> [<variant>]"`.
  public static func title(of report: Report) -> String {
    "\(report.scenario.name) [\(report.scenario.variant)]"
  }

  /// JSON that can sit inside `<script type="application/json">`: every `<` becomes the JSON
  /// escape `\u003c`, so neither `</script>` nor `<!--` can end or alter the block. A `<` only
  /// ever occurs inside a JSON string, where the escape means the same character.
  static func scriptSafeJSON(_ json: Data) -> String {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(json.count + json.count / 64)
    let escape = Array(#"\u003c"#.utf8)
    for byte in json {
      if byte == UInt8(ascii: "<") {
        bytes.append(contentsOf: escape)
      } else {
        bytes.append(byte)
      }
    }
    return String(decoding: bytes, as: UTF8.self)
  }

  // Parsed once: the skeleton never changes while the process runs.
  private static let parsedTemplate = Result { try MustacheTemplate(string: skeleton) }

  private static func template() throws -> MustacheTemplate {
    try parsedTemplate.get()
  }

  /// The page skeleton, `Resources/report.mustache`. Triple mustaches insert the styles, script
  /// and data unescaped: they are ours, and the data is made script-safe above.
  private static let skeleton = HTMLAsset.text(PackageResources.report_mustache)
}
