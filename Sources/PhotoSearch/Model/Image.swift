/// An RGBA bitmap, 8 bits per channel: the stand-in for `UIImage`.
public final class Image: Sendable {
  public let width: Int
  public let height: Int
  /// Row-major RGBA bytes, `width * height * 4` of them.
  public let pixels: [UInt8]

  public init(width: Int, height: Int, pixels: [UInt8]) {
    precondition(pixels.count == width * height * 4, "an RGBA bitmap needs width*height*4 bytes")
    self.width = width
    self.height = height
    self.pixels = pixels
  }

  public var byteCount: Int { pixels.count }
}
