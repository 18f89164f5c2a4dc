import Testing

@testable import PerfHarness

@Suite("Simplified Swift symbol names")
struct SymbolNameTests {
  @Test(arguments: [
    (
      "closure #1 (Swift.UnsafeBufferPointer<Swift.UInt8>) -> () in closure #1 (inout Swift.UnsafeMutableBufferPointer<Swift.UInt8>) -> () in PhotoSearch.Image.applyTonalFilter() -> PhotoSearch.Image",
      "closure #1 in closure #1 in PhotoSearch.Image.applyTonalFilter()"
    ),
    (
      "PhotoSearch.Image.init(decoding: Swift.Array<Swift.UInt8>, side: Swift.Int) -> PhotoSearch.Image",
      "PhotoSearch.Image.init(decoding:side:)"
    ),
    (
      "App.ViewController.collectionView(_: App.CollectionView, cellForItemAt: Swift.Int) -> App.Cell",
      "App.ViewController.collectionView(_:cellForItemAt:)"
    ),
    ("static Swift.Int.+ infix(Swift.Int, Swift.Int) -> Swift.Int", "static Swift.Int.+ infix(_:_:)"),
    (
      "generic specialization <Swift.Int> of Swift.Array.append(__owned A) -> ()",
      "generic specialization <Swift.Int> of Swift.Array.append(_:)"
    ),
    ("malloc", "malloc"),
    (
      "closure #2 in closure #1 @Swift.MainActor @Sendable (PerfHarness.ScenarioContext) throws -> () in variable initialization expression of static Scenarios.All.retain : PerfHarness.Scenario",
      "closure #2 in closure #1 in variable initialization expression of static Scenarios.All.retain"
    ),
    (
      "PhotoSearch.CollectionView.(layoutVisibleCells in _0DF3A1B2)() -> ()",
      "PhotoSearch.CollectionView.layoutVisibleCells()"
    ),
    ("std::vector<int>::push_back(int const&)", "std::vector<int>::push_back(_:)"),
  ])
  func simplifies(_ demangled: String, _ expected: String) {
    #expect(SymbolName.simplified(demangled) == expected)
  }
}
