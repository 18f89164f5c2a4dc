import PerfHarness
import PhotoSearch

/// The scenarios of the Instruments tutorial, run against the PhotoSearch sample app.
public enum PhotoSearchScenarios {
  public static let all: [Scenario] = [filteredThumbnailScrolling, searchDrillDowns, closureRetainCycles]

  /// Search, then scroll the results down and up: the Time Profiler's part of the tutorial.
  public static let filteredThumbnailScrolling = Scenario(
    "filtered-thumbnail-scrolling",
    summary: "Search, then scroll the filtered thumbnails down and up (iterations = scroll passes)",
    defaultIterations: 3
  ) { context in
    let app = try launchApp(context)
    context.step("search") { app.search("dog") }
    context.step("open results") {
      app.openSearch(at: 0)
      app.waitUntilIdle()
    }
    for _ in 0..<context.iterations {
      context.step("scroll down and up") {
        app.scrollResultsDownAndUp()
        app.waitUntilIdle()
      }
    }
    context.step("back") { app.goBack() }
  }

  /// Five searches, then drill into them one after another with a generation marked after
  /// each, then a memory warning: the Allocations part of the tutorial.
  public static let searchDrillDowns = Scenario(
    "search-drill-downs",
    summary: "Five searches, then drill into each and back with a generation per drill-down, then a memory warning",
    defaultIterations: 5
  ) { context in
    let app = try launchApp(context)
    let terms = ["dog", "cat", "bird", "tree", "boat"]
    for term in terms {
      context.step("search") { app.search(term) }
    }
    context.markGeneration("Searches")
    for iteration in 0..<context.iterations {
      context.step("drill down") {
        app.openSearch(at: iteration % terms.count)
        app.scrollResultsDownAndUp()
        app.waitUntilIdle()
        app.goBack()
      }
      context.markGeneration("Drill-down \(iteration + 1)")
    }
    context.simulateMemoryWarning()
  }

  /// Drill into a search and back, tapping hearts: the retain-cycle part of the tutorial.
  public static let closureRetainCycles = Scenario(
    "closure-retain-cycles",
    summary: "Drill into a search and back N times, toggling the heart on a few cells each time",
    defaultIterations: 5,
    // The tutorial's third finding is a retain cycle: only the memory graph shows it.
    instruments: [.time, .allocations, .leaks]
  ) { context in
    let app = try launchApp(context)
    context.step("search") { app.search("dog") }
    for _ in 0..<context.iterations {
      context.step("drill in, toggle hearts, back") {
        app.openSearch(at: 0)
        for cell in 0..<3 {
          app.toggleHeart(onVisibleCell: cell)
        }
        app.waitUntilIdle()
        app.goBack()
      }
    }
  }

  /// A freshly launched app with its own cache, so runs do not share state.
  @MainActor
  private static func launchApp(_ context: ScenarioContext) throws -> PhotoSearchApp {
    guard let variant = AppVariant(rawValue: context.variant.rawValue) else {
      throw UnknownVariant(name: context.variant.rawValue)
    }
    return PhotoSearchApp(variant: variant, imageCache: ImageCache())
  }
}

struct UnknownVariant: Error, CustomStringConvertible {
  var name: String
  var description: String {
    "PhotoSearch has no variant '\(name)'; it has \(AppVariant.allCases.map(\.rawValue).joined(separator: ", "))"
  }
}
