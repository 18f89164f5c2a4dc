/// What `scenario` and `record` record, in the words of the options' help they share: a
/// program declares no instruments, and its thresholds file is named after its executable.
protocol RecordedSubject {
  /// What `--instruments` records when it is not given.
  static var defaultInstruments: String { get }
  /// What one text summary is of.
  static var summary: String { get }
  /// Whose thresholds `--check` evaluates, and where they are.
  static var thresholds: String { get }
  /// A thresholds file in the `--thresholds` folder.
  static var thresholdsFile: String { get }
}

/// The words of `scenario --help`.
enum ScenarioSubject: RecordedSubject {
  static let defaultInstruments = "what each scenario declares; see 'list'"
  static let summary = "a summary per scenario"
  static let thresholds = "the scenario's thresholds"
  static let thresholdsFile = "<scenario>.yaml"
}

/// The words of `record --help`.
enum ProgramSubject: RecordedSubject {
  static let defaultInstruments = "time,allocations,leaks"
  static let summary = "a summary of the program's run"
  static let thresholds = "the program's thresholds (<executable name>.yaml in --thresholds, and the limit flags)"
  static let thresholdsFile = "<executable name>.yaml"
}
