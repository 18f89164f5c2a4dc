import Foundation
import PerfBenchSupport
import PerfHarness
import Testing

@testable import PerfReports

/// The HTML page as text: self-contained, its data block safe, every section's data inside.
/// The page's behaviour in a real browser is tested in PerfHarnessCLITests/HTMLBrowserTests.
@Suite("HTML report")
struct HTMLReportTests {
  /// A small report with every section: a profile, allocations, leaks, checks and marks.
  private func fullReport() throws -> Report {
    try HTMLReport.syntheticReport(samples: 300, stackDepth: 12, allocations: 20_000)
  }

  /// The JSON inside the page's data block, decoded.
  private func embeddedJSON(_ html: String) throws -> [String: Any] {
    let start = try #require(html.range(of: #"<script type="application/json" id="report-data">"#))
    let end = try #require(html.range(of: "</script>", range: start.upperBound..<html.endIndex))
    let block = String(html[start.upperBound..<end.lowerBound])
    return try #require(JSONSerialization.jsonObject(with: Data(block.utf8)) as? [String: Any])
  }

  @Test("the page loads nothing from elsewhere: no http(s) URL in src or href, no external script or style")
  func selfContained() throws {
    let html = try HTMLReport.render(fullReport())
    let external = try Regex(#"(?i)(src|href)\s*=\s*["']?\s*(https?:)?//"#)
    #expect(html.firstMatch(of: external) == nil)
    #expect(!html.contains("<link"))
    #expect(!html.contains("@import"))
    #expect(!html.lowercased().contains("<script src"))
    #expect(html.hasPrefix("<!DOCTYPE html>"))
    #expect(html.contains("<style>") && html.contains(HTMLReport.styles))
  }

  @Test("the data block escapes </script> and <!-- in symbol names, and still holds the same JSON")
  func dataBlockEscapes() throws {
    var report = try fullReport()
    let hostile = "evil</script><script>alert(1)</script><!-- x"
    report.timeProfile?.profile.frames[5].name = hostile
    report.allocations?.categories[0].name = "</SCRIPT>" + hostile
    let html = try HTMLReport.render(report)
    // The only closing tags are those of the page's own script elements.
    let opened = html.components(separatedBy: "<script").count - 1
    #expect(opened == 5)
    #expect(html.lowercased().components(separatedBy: "</script").count - 1 == opened)
    #expect(!html.contains("<!--"))
    let json = try embeddedJSON(html)
    let profile = try #require((json["timeProfile"] as? [String: Any])?["profile"] as? [String: Any])
    let frames = try #require(profile["frames"] as? [[String: Any]])
    #expect(frames[5]["name"] as? String == hostile)
  }

  @Test("a report with every section carries each section's data and the code that draws it")
  func everySection() throws {
    let report = try fullReport()
    #expect(report.timeProfile != nil && report.allocations != nil && report.leaks != nil)
    let html = try HTMLReport.render(report)
    let json = try embeddedJSON(html)
    for key in ["scenario", "checks", "marks", "steps", "timeProfile", "allocations", "leaks"] {
      #expect(json[key] != nil, "\(key)")
    }
    for id in ["summary", "comparison", "time-profile", "allocations", "leaks", "selftest-result"] {
      #expect(html.contains(#"id="\#(id)""#), "\(id)")
    }
    for function in ["summaryHTML", "comparisonHTML", "timeProfileHTML", "allocationsHTML", "leaksHTML", "cycleHTML"] {
      #expect(html.contains("function \(function)("), "\(function)")
    }
  }

  @Test("the samples block holds every sample as [thread, weight, stack], and its count when merged")
  func compactSamples() throws {
    var report = try fullReport()
    report.timeProfile?.profile.samples[0].count = 7
    let samples = try #require(report.timeProfile?.profile.samples)
    let html = try HTMLReport.render(report)
    let start = try #require(html.range(of: #"<script type="application/json" id="profile-samples">"#))
    let end = try #require(html.range(of: "</script>", range: start.upperBound..<html.endIndex))
    let rows = try #require(
      JSONSerialization.jsonObject(with: Data(html[start.upperBound..<end.lowerBound].utf8)) as? [[Any]])
    #expect(rows.count == samples.count)
    for (row, sample) in zip(rows, samples) {
      #expect(row[0] as? Int == sample.thread)
      #expect(row[1] as? Double == sample.weight)
      #expect(row[2] as? [Int] == sample.stack)
      #expect((row.count > 3 ? row[3] as? Int : 1) == sample.sampleCount)
    }
    #expect(rows.first?.count == 4 && rows.dropFirst().allSatisfy { $0.count == 3 })
    // The report's own block leaves them out rather than holding them twice.
    let profile = try #require((embeddedJSON(html)["timeProfile"] as? [String: Any])?["profile"] as? [String: Any])
    #expect((profile["samples"] as? [Any])?.isEmpty == true)
  }

  @Test("a comparison key the model does not know is embedded as it is")
  func comparisonPassesThrough() throws {
    var object = try #require(
      JSONSerialization.jsonObject(with: ReportJSON.encode(fullReport())) as? [String: Any])
    object["comparison"] = [
      "baseline": "base.json", "tolerancePercent": 10, "passed": false,
      "rows": [["metric": "growth", "baseline": 1.0, "current": NSNull(), "changePercent": NSNull(), "passed": false]],
    ]
    let html = try HTMLReport.render(
      reportJSON: JSONSerialization.data(withJSONObject: object), title: "with comparison")
    let comparison = try #require(embeddedJSON(html)["comparison"] as? [String: Any])
    #expect(comparison["baseline"] as? String == "base.json")
    #expect((comparison["rows"] as? [Any])?.count == 1)
  }

  @Test("the title is HTML-escaped")
  func titleEscaped() throws {
    let html = try HTMLReport.render(reportJSON: Data("{}".utf8), title: "<b>x</b> & y")
    #expect(html.contains("<title>&lt;b&gt;x&lt;/b&gt; &amp; y · perfharness</title>"))
    #expect(!html.contains("<b>x</b>"))
  }

  @Test("the synthetic bench report has the requested size and renders with a timing")
  func syntheticReportSize() throws {
    let report = try HTMLReport.syntheticReport(samples: 1000, stackDepth: 30, allocations: 100_000)
    let profile = try #require(report.timeProfile?.profile)
    #expect(profile.samples.count == 1000)
    #expect(profile.samples.allSatisfy { $0.stack.count == 30 })
    #expect(Set(profile.samples.map(\.stack)).count > 900)
    #expect(report.allocations?.totals.totalAllocations == 100_000)
    let (html, timing) = try HTMLReport.timedRender(report)
    #expect(timing.bytes == html.utf8.count)
    #expect(timing.milliseconds > 0)
  }

  @Test("the page's own timing is read back from a dumped DOM")
  func browserTiming() {
    let dom = #"<html lang="en" data-parsed-ms="12.5" data-tree-ms="40.0" data-rendered-ms="52.1"><head>"#
    #expect(
      HTMLReport.browserTiming(fromDOM: dom)
        == .init(parsedMilliseconds: 12.5, treeMilliseconds: 40, renderedMilliseconds: 52.1))
    #expect(HTMLReport.browserTiming(fromDOM: "<html><head>") == nil)
  }
}
