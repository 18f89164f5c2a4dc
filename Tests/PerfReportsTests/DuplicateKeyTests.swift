import Foundation
import PerfHarness
import Testing

@testable import PerfReports

/// JSON leaves a duplicated key undefined and readers disagree (Foundation keeps one, a
/// browser's JSON.parse the last), so every report reader refuses it.
@Suite("Duplicate keys in a report")
struct DuplicateKeyTests {
  @Test(
    "the first key that appears twice in one object is found, with the path of its object",
    arguments: [
      (#"{"status":"failed","status":"passed"}"#, "status", [String]()),
      (#"{"a":{"b":1,"c":[{"x":1},{"x":2,"y":3,"x":4}]}}"#, "x", ["a", "c", "1"]),
      // The same key written two ways is one key.
      (#"{"status":1,"st\u0061tus":2}"#, "status", []),
      (#"{"k\"ey":1,"k\"ey":2}"#, "k\"ey", []),
    ])
  func found(json: String, key: String, path: [String]) throws {
    let duplicate = try #require(DuplicateKeys.first(in: Data(json.utf8)))
    #expect(duplicate.key == key)
    #expect(duplicate.path == path)
  }

  @Test(
    "the same key in different objects, in strings and in arrays is no duplicate",
    arguments: [
      #"{"a":{"x":1},"b":{"x":1}}"#, #"[{"x":1},{"x":2}]"#, #"{"x":"x","y":["x","x"]}"#,
      #"{"x":"{\"x\":1,\"x\":2}"}"#, #"{"x":1,"y":{"z":[1,2,{"x":3}]},"z":2}"#,
    ])
  func notFound(json: String) {
    #expect(DuplicateKeys.first(in: Data(json.utf8)) == nil)
  }

  @Test("ReportJSON.decode refuses a report with a duplicated status, naming the key")
  func decodeRefuses() throws {
    let report = Report.crashed(
      scenario: "some-scenario", variant: "starter", iterations: 1, instruments: [], error: "e",
      wallTimeMilliseconds: 1, crash: CrashInfo(signal: nil, timedOut: false, stack: [], standardErrorTail: []))
    let text = String(decoding: try ReportJSON.encode(report, pretty: false), as: UTF8.self)
    _ = try ReportJSON.decode(Data(text.utf8))
    let edited = text.replacingOccurrences(of: #""status":"crashed""#, with: #""status":"failed","status":"passed""#)
    #expect(edited != text)
    #expect {
      _ = try ReportJSON.decode(Data(edited.utf8))
    } throws: { error in
      "\(error)".contains("the key 'status' appears twice in one object")
    }
  }
}
