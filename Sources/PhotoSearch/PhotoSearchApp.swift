import Foundation

/// The running app: a navigation stack over a search screen, driven by a scenario the way
/// a user drives the tutorial's app. Everything runs on the main thread except the fixed
/// variant's filtering.
@MainActor
public final class PhotoSearchApp {
  public let variant: AppVariant
  public let navigationController: NavigationController
  public let searchViewController: SearchViewController
  public let imageCache: ImageCache
  private let backgroundWork: BackgroundWork

  /// - Parameters:
  ///   - variant: which version of the app code runs.
  ///   - imageCache: the cache to use; `ImageCache.shared` by default, as in the tutorial.
  ///     The starter app never lets it empty; the fixed one empties it on a memory warning.
  public init(variant: AppVariant, imageCache: ImageCache = .shared, service: PhotoSearchService = .init()) {
    self.variant = variant
    self.imageCache = imageCache
    imageCache.emptiesOnMemoryWarning = variant == .fixed
    backgroundWork = BackgroundWork()
    let environment = AppEnvironment(
      variant: variant, service: service, imageCache: imageCache, backgroundWork: backgroundWork)
    searchViewController = SearchViewController(environment: environment)
    navigationController = NavigationController(rootViewController: searchViewController)
  }

  /// The results screen on top of the stack, if one is shown.
  public var resultsViewController: SearchResultsViewController? {
    navigationController.topViewController as? SearchResultsViewController
  }

  @discardableResult
  public func search(_ term: String) -> SearchResults {
    searchViewController.performSearch(term)
  }

  /// Taps a search in the list: pushes its results, whose visible thumbnails load at once.
  @discardableResult
  public func openSearch(at index: Int) -> SearchResultsViewController {
    let controller = searchViewController.resultsViewController(forSearchAt: index)
    navigationController.pushViewController(controller)
    return controller
  }

  /// Taps the back button.
  public func goBack() {
    navigationController.popViewController()
  }

  /// Scrolls the visible results to `row`, one row at a time as a finger would.
  public func scrollResults(toRow row: Int) {
    guard let collectionView = resultsViewController?.collectionView else { return }
    let step = row >= collectionView.firstVisibleRow ? 1 : -1
    var current = collectionView.firstVisibleRow
    while current != row {
      current += step
      collectionView.scroll(toRow: current)
      if collectionView.firstVisibleRow != current { break }
    }
  }

  /// Scrolls the results to the end and back to the top.
  public func scrollResultsDownAndUp() {
    guard let collectionView = resultsViewController?.collectionView else { return }
    scrollResults(toRow: max(0, collectionView.numberOfRows - collectionView.visibleRows))
    scrollResults(toRow: 0)
  }

  /// Taps the heart of the `index`-th visible cell.
  public func toggleHeart(onVisibleCell index: Int) {
    guard let collectionView = resultsViewController?.collectionView else { return }
    let items = collectionView.visibleItems
    guard !items.isEmpty else { return }
    let item = items.lowerBound + index % items.count
    collectionView.visibleCells[item]?.toggleHeart()
  }

  /// Runs the main run loop until every piece of background work has delivered its result.
  ///
  /// Call it from plain code on the main thread (a scenario). Inside a main-queue block the
  /// main queue cannot be drained; use `settle()` from async code there.
  public func waitUntilIdle() {
    let deadline = Date(timeIntervalSinceNow: 120)
    while backgroundWork.pending > 0 {
      _ = RunLoop.main.run(mode: .default, before: Date(timeIntervalSinceNow: 0.005))
      precondition(
        Date() < deadline,
        "background work did not finish in 120 s: is waitUntilIdle() running inside a main-queue block?")
    }
    // The workers' blocks have delivered; wait until Dispatch has also released them, so
    // nothing they captured outlives the wait.
    backgroundWork.workers.wait()
  }

  /// Suspends until every piece of background work has delivered its result, letting the
  /// main queue run meanwhile.
  public func settle() async {
    while backgroundWork.pending > 0 {
      try? await Task.sleep(for: .milliseconds(1))
    }
    backgroundWork.workers.wait()
  }
}
