// The README's example: a package of your own declares scenarios and gets the same CLI.
// Built by `swift build` and run by the end-to-end tests, so the example stays true.
import PerfHarness
import PerfHarnessCLI

/// A stand-in for your own code under test.
final class Inventory {
  private(set) var items: [String] = []
  let keepsHistory: Bool
  init(keepsHistory: Bool) { self.keepsHistory = keepsHistory }

  func restock(_ count: Int) {
    if !keepsHistory { items.removeAll() }
    items += (0..<count).map { "item-\($0)" }
  }
}

let restocking = Scenario(
  "inventory-restocking",
  summary: "Restock the inventory N times, marking a generation after each",
  defaultIterations: 3
) { context in
  let inventory = Inventory(keepsHistory: context.variant == .starter)
  for round in 1...context.iterations {
    context.step("restock") { inventory.restock(1_000) }
    context.markGeneration("Restock \(round)")
  }
}

PerfHarnessCLI.main(scenarios: [restocking])
