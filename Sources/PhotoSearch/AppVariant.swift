/// Which version of the app's code runs: the tutorial's starting point or its fixed version.
public enum AppVariant: String, Sendable, CaseIterable {
  /// Tonal filter on the main thread, an image cache that only grows, and a
  /// `heartToggleHandler` that captures the view controller strongly.
  case starter
  /// Filtering on a background queue with results cached, a cache that empties on a memory
  /// warning, and a `[weak self]` capture.
  case fixed
}
