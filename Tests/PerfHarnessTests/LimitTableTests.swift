import Foundation
import Testing

@testable import PerfHarness

@Suite("The limits table")
struct LimitTableTests {
  /// A value each form accepts, as a file writes it.
  static func example(_ form: Limit.Form) -> String {
    switch form {
    case .size: "64 KB"
    case .count: "3"
    case .percent: "95%"
    case .typeCounts: "App.Screen=2"
    }
  }

  @Test("every limit in the table is read from a thresholds file, sets only itself and asks its instrument")
  func everyKeyIsReadFromAFile() throws {
    for limit in Limit.all {
      let value = Self.example(limit.form)
      let text =
        limit.form == .typeCounts
        ? "\(limit.key):\n  \(value.replacingOccurrences(of: "=", with: ": "))\n" : "\(limit.key): \(value)\n"
      let thresholds = try Thresholds.parse(text, path: "t.yaml")
      #expect(limit.isSet(in: thresholds), "\(limit.key)")
      #expect(Limit.all.filter { $0.isSet(in: thresholds) }.map(\.key) == [limit.key])
      #expect(thresholds.requiredInstruments == Set([limit.instrument].compactMap { $0 }), "\(limit.key)")
      #expect(thresholds.isEmpty == (limit.instrument == nil), "\(limit.key)")
    }
  }

  @Test("a value in the wrong form names the key and the accepted forms")
  func wrongFormsAreRefused() {
    for limit in Limit.all where limit.form != .typeCounts {
      #expect {
        try Thresholds.parse("\(limit.key): twelve\n", path: "t.yaml")
      } throws: { error in
        "\(error)".contains(
          "t.yaml:1: \(limit.key): 'twelve' is not a \(limit.form.noun); accepted: \(limit.form.accepted)")
      }
    }
    #expect(Limit.maxPersistent.parse("App.Screen") == nil)
    #expect(Limit.maxPersistent.parse("App.Screen=2") == .typeCount("App.Screen", 2))
  }

  @Test("keys and flags are unique")
  func unique() {
    #expect(Set(Limit.all.map(\.key)).count == Limit.all.count)
    let flags = Limit.all.compactMap(\.flag)
    #expect(Set(flags).count == flags.count)
  }
}
