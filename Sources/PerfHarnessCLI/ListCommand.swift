import ArgumentParser
import PerfHarness

struct ListCommand: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "list", abstract: "List the scenarios, their variants and the instruments.")

  func run() throws {
    let catalog = PerfHarnessCLI.currentCatalog
    var output = "Scenarios:\n"
    let width = catalog.names.map(\.count).max() ?? 0
    for scenario in catalog.scenarios {
      let padding = String(repeating: " ", count: width - scenario.name.count)
      output += "  \(scenario.name)\(padding)  \(scenario.summary)\n"
      output +=
        "  \(String(repeating: " ", count: width))  variants: "
        + scenario.variants.map(\.rawValue).joined(separator: ", ")
        + " (default \(scenario.variants[0])) · iterations: \(scenario.defaultIterations)\n"
    }
    output += "Instruments:\n"
    for instrument in Instrument.allCases {
      let state =
        Instrument.defaults.contains(instrument)
        ? "on by default"
        : Instrument.available.contains(instrument) ? "opt-in (--instruments)" : "not in this build yet"
      output += "  \(instrument.rawValue): \(state)\n"
    }
    print(output, terminator: "")
  }
}
