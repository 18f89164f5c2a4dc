import Testing

@testable import PerfHarnessCLI

@Suite("Did you mean: the nearest accepted form by edit distance")
struct SuggestionTests {
  @Test(
    "edits, a swap of neighbours as one",
    arguments: [
      ("report", "report", 0), ("reprot", "report", 1), ("leak", "leaks", 1), ("", "time", 4),
      ("kitten", "sitting", 3), ("xml", "text", 4), ("ab", "ba", 1),
    ])
  func distance(a: String, b: String, edits: Int) {
    #expect(Suggestion.editDistance(a, b) == edits)
    #expect(Suggestion.editDistance(b, a) == edits)
  }

  @Test(
    "within a third of the input's length, case ignored; equally near ones together",
    arguments: [
      ("leak", ["time", "allocations", "leaks"], ["leaks"]),
      ("Leaks", ["time", "allocations", "leaks"], ["leaks"]),
      ("cpu", ["time", "allocations", "leaks"], []),
      ("reprot", ["list", "scenario", "record", "report", "compare"], ["report"]),
      ("frobnicate", ["list", "scenario", "record", "report", "compare"], []),
      ("tx", ["text"], []),
      ("texts", ["text", "tests"], ["text", "tests"]),
      ("leaks", ["leaks"], []),
    ])
  func nearest(input: String, candidates: [String], expected: [String]) {
    #expect(Suggestion.nearest(to: input, among: candidates) == expected)
  }
}
