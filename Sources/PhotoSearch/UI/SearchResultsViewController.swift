import Dispatch

/// Shows one search's photos as a grid of filtered thumbnails.
@MainActor
public final class SearchResultsViewController: ViewController, CollectionViewDataSource {
  public let searchResults: SearchResults
  public let collectionView = CollectionView()
  private let environment: AppEnvironment

  init(searchResults: SearchResults, environment: AppEnvironment) {
    self.searchResults = searchResults
    self.environment = environment
    super.init(title: searchResults.searchTerm)
  }

  public override func viewDidLoad() {
    collectionView.dataSource = self
    collectionView.reloadData()
  }

  public func numberOfItems(in collectionView: CollectionView) -> Int {
    searchResults.photos.count
  }

  public func collectionView(_ collectionView: CollectionView, cellForItemAt item: Int)
    -> SearchResultsCollectionViewCell
  {
    let cell = collectionView.dequeueReusableCell()
    let photo = searchResults.photos[item]
    cell.photo = photo
    switch environment.variant {
    case .starter:
      // The tutorial's bug: the closure captures self strongly, and self owns the
      // collection view that owns this cell.
      cell.heartToggleHandler = { isStarred in
        self.collectionView.reloadItems(at: [item])
      }
      let image = environment.imageCache.loadThumbnail(for: photo.id, service: environment.service)
      // The tutorial's hot spot: filtering synchronously on the main thread, uncached.
      cell.imageView.image = photo.isFavourite ? image : image.applyTonalFilter()
    case .fixed:
      cell.heartToggleHandler = { [weak self] isStarred in
        self?.collectionView.reloadItems(at: [item])
      }
      let image = environment.imageCache.loadThumbnail(for: photo.id, service: environment.service)
      if photo.isFavourite {
        cell.imageView.image = image
      } else if let cached = environment.imageCache.image(forKey: photo.filteredCacheKey) {
        cell.imageView.image = cached
      } else {
        filterInBackground(image, for: photo, into: cell)
      }
    }
    return cell
  }

  private func filterInBackground(_ image: Image, for photo: Photo, into cell: SearchResultsCollectionViewCell) {
    let cache = environment.imageCache
    let key = photo.filteredCacheKey
    let work = environment.backgroundWork
    work.begin()
    DispatchQueue.global().async(group: work.workers) {
      let filtered = image.applyTonalFilter()
      cache.set(filtered, forKey: key)
      DispatchQueue.main.async {
        MainActor.assumeIsolated {
          if cell.photo === photo {
            cell.imageView.image = filtered
          }
          work.end()
        }
      }
    }
  }
}
