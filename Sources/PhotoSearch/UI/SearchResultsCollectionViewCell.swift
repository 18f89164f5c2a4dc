/// One thumbnail cell with a heart button.
@MainActor
public final class SearchResultsCollectionViewCell {
  public let imageView = ImageView()
  public var photo: Photo?
  /// Called when the heart is tapped, with the new favourite state.
  public var heartToggleHandler: ((Bool) -> Void)?

  public init() {}

  /// Like `prepareForReuse()`: the handler stays until the next configuration replaces it,
  /// as in UIKit.
  public func prepareForReuse() {
    imageView.image = nil
    photo = nil
  }

  /// Taps the heart.
  public func toggleHeart() {
    guard let photo else { return }
    photo.isFavourite.toggle()
    heartToggleHandler?(photo.isFavourite)
  }
}
