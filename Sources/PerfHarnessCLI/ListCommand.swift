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
        + " (default \(scenario.variants[0])) · iterations: \(scenario.defaultIterations)"
        + " · instruments: \(scenario.instruments.isEmpty ? "none" : scenario.instruments.map(\.rawValue).joined(separator: ","))\n"
    }
    output += "Instruments:\n"
    for instrument in Instrument.allCases {
      let declaring = catalog.scenarios.filter { $0.instruments.contains(instrument) }.map(\.name)
      let state =
        !Instrument.available.contains(instrument)
        ? "not in this build yet"
        : Instrument.defaults.contains(instrument)
          ? "on by default"
          : declaring.isEmpty
            ? "opt-in (--instruments)" : "opt-in (--instruments); declared by \(declaring.joined(separator: ", "))"
      output += "  \(instrument.rawValue): \(state)\n"
    }
    print(output, terminator: "")
  }
}
