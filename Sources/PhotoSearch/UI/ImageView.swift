/// Shows one image: the headless counterpart of `UIImageView`.
@MainActor
public final class ImageView {
  public var image: Image?
  public init() {}
}
