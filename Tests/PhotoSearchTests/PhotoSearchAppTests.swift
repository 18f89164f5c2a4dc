import Foundation
import Testing

@testable import PhotoSearch

@MainActor
@Suite("PhotoSearch app, both variants")
struct PhotoSearchAppTests {
  /// Drills into a search and back `times` times, toggling hearts, and returns how many of
  /// the popped results screens are still alive.
  private func survivingResultsControllers(variant: AppVariant, times: Int) async -> Int {
    let app = PhotoSearchApp(
      variant: variant, imageCache: ImageCache(notificationCenter: NotificationCenter()),
      service: PhotoSearchService(thumbnailSide: 16))
    app.search("dog")
    var popped: [WeakBox<SearchResultsViewController>] = []
    var poppedCells: [WeakBox<SearchResultsCollectionViewCell>] = []
    for _ in 0..<times {
      let controller = app.openSearch(at: 0)
      app.toggleHeart(onVisibleCell: 0)
      app.toggleHeart(onVisibleCell: 1)
      await app.settle()
      poppedCells += controller.collectionView.allCells.map(WeakBox.init)
      popped.append(WeakBox(controller))
      app.goBack()
    }
    let liveCells = poppedCells.filter { $0.value != nil }.count
    let liveControllers = popped.filter { $0.value != nil }.count
    // Cells die with their controller, or not at all.
    #expect((liveControllers == 0) == (liveCells == 0))
    return liveControllers
  }

  @Test("starter leaks every results screen through heartToggleHandler; fixed leaks none")
  func retainCycle() async {
    #expect(await survivingResultsControllers(variant: .starter, times: 4) == 4)
    #expect(await survivingResultsControllers(variant: .fixed, times: 4) == 0)
  }

  @Test("starter cache only grows; fixed cache empties on a memory warning", arguments: AppVariant.allCases)
  func cacheAndMemoryWarning(variant: AppVariant) async {
    let center = NotificationCenter()
    let cache = ImageCache(notificationCenter: center)
    let app = PhotoSearchApp(variant: variant, imageCache: cache, service: PhotoSearchService(thumbnailSide: 16))
    var counts: [Int] = []
    for (index, term) in ["dog", "cat", "owl"].enumerated() {
      app.search(term)
      app.openSearch(at: 0)
      app.scrollResultsDownAndUp()
      await app.settle()
      app.goBack()
      counts.append(cache.count)
      #expect(index == 0 || counts[index] > counts[index - 1], "every new search adds thumbnails")
    }
    center.post(name: .applicationDidReceiveMemoryWarning, object: nil)
    switch variant {
    case .starter: #expect(cache.count == counts.last)
    case .fixed: #expect(cache.count == 0)
    }
  }

  @Test("fixed caches filtered thumbnails; starter caches only the originals", arguments: AppVariant.allCases)
  func filteredCaching(variant: AppVariant) async {
    let cache = ImageCache(notificationCenter: NotificationCenter())
    let app = PhotoSearchApp(variant: variant, imageCache: cache, service: PhotoSearchService(thumbnailSide: 16))
    let results = app.search("dog")
    app.openSearch(at: 0)
    await app.settle()
    let visible = app.resultsViewController!.collectionView.visibleItems
    let filtered = visible.filter { cache.image(forKey: results.photos[$0].filteredCacheKey) != nil }
    let unfavourite = visible.filter { !results.photos[$0].isFavourite }
    switch variant {
    case .starter: #expect(filtered.isEmpty)
    case .fixed: #expect(filtered.count == unfavourite.count && !filtered.isEmpty)
    }
    // Every visible cell shows an image once the app is idle.
    let cells = app.resultsViewController!.collectionView.visibleCells
    #expect(cells.count == visible.count)
    #expect(cells.values.allSatisfy { $0.imageView.image != nil })
  }

  @Test("fixed filters on worker threads and delivers on the main thread")
  func fixedFiltersOffMain() async {
    let app = PhotoSearchApp(
      variant: .fixed, imageCache: ImageCache(notificationCenter: NotificationCenter()),
      service: PhotoSearchService(thumbnailSide: 16))
    app.search("dog")
    let controller = app.openSearch(at: 0)
    let favourites = controller.collectionView.visibleItems.filter { controller.searchResults.photos[$0].isFavourite }
    // Before the run loop turns, only favourites (unfiltered) can show an image.
    let shownEarly = controller.collectionView.visibleCells.filter { $0.value.imageView.image != nil }
    #expect(Set(shownEarly.keys).isSubset(of: Set(favourites)))
    await app.settle()
    #expect(controller.collectionView.visibleCells.values.allSatisfy { $0.imageView.image != nil })
  }
}

struct WeakBox<Object: AnyObject> {
  weak var value: Object?
  init(_ value: Object) { self.value = value }
}
