/// A photo from a search: the headless counterpart of the tutorial's `FlickrPhoto`.
@MainActor
public final class Photo {
  public nonisolated let id: String
  public nonisolated let title: String
  public var isFavourite: Bool

  public init(id: String, title: String, isFavourite: Bool = false) {
    self.id = id
    self.title = title
    self.isFavourite = isFavourite
  }

  /// The key under which the filtered thumbnail is cached.
  public nonisolated var filteredCacheKey: String { "\(id)-filtered" }
}

/// The photos found for one search term.
public struct SearchResults {
  public let searchTerm: String
  public let photos: [Photo]
}
