/// The first screen: a list of past searches (the tutorial's `ViewController`).
@MainActor
public final class SearchViewController: ViewController {
  public private(set) var searches: [SearchResults] = []
  private let environment: AppEnvironment

  init(environment: AppEnvironment) {
    self.environment = environment
    super.init(title: "Search")
  }

  /// Runs a search and lists it first, as the tutorial's app does.
  @discardableResult
  public func performSearch(_ term: String) -> SearchResults {
    let results = environment.service.search(for: term)
    searches.insert(results, at: 0)
    return results
  }

  func resultsViewController(forSearchAt index: Int) -> SearchResultsViewController {
    SearchResultsViewController(searchResults: searches[index], environment: environment)
  }
}
