/// The photo search API over a deterministic local corpus: the tutorial's `FlickrAPI`
/// without the network.
public struct PhotoSearchService: Sendable {
  /// Decoded thumbnails are `thumbnailSide` × `thumbnailSide` RGBA.
  public let thumbnailSide: Int
  public let resultCountRange: ClosedRange<Int>

  public init(thumbnailSide: Int = 160, resultCountRange: ClosedRange<Int> = 60...120) {
    precondition(thumbnailSide >= 2, "a thumbnail needs at least 2x2 pixels")
    self.thumbnailSide = thumbnailSide
    self.resultCountRange = resultCountRange
  }

  /// Finds the photos for a term; the same term always gives the same photos.
  @MainActor
  public func search(for term: String) -> SearchResults {
    var generator = SeededGenerator(hashing: term)
    let count = Int.random(in: resultCountRange, using: &generator)
    let photos = (0..<count).map { index in
      let serial = generator.next() & 0xffff_ffff
      return Photo(
        id: "\(term)-\(index)-\(String(serial, radix: 16))",
        title: "\(term.capitalized) #\(index + 1)",
        isFavourite: generator.next() % 10 == 0)
    }
    return SearchResults(searchTerm: term, photos: photos)
  }

  /// The compressed thumbnail for a photo id, as the server would send it.
  public func thumbnailPayload(forPhotoID id: String) -> [UInt8] {
    var generator = SeededGenerator(hashing: id)
    let grid = ThumbnailPayload.gridSize
    return (0..<(grid * grid * 3)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
  }

  /// Fetches and decodes a thumbnail.
  public func loadThumbnail(forPhotoID id: String) -> Image {
    Image(decoding: thumbnailPayload(forPhotoID: id), side: thumbnailSide)
  }
}

extension String {
  fileprivate var capitalized: String {
    guard let first else { return self }
    return first.uppercased() + dropFirst()
  }
}
