extension Image {
  /// Decodes the compressed thumbnail payload the search service delivers.
  ///
  /// The payload is a coarse grid of colour cells; decoding interpolates it bilinearly to a
  /// full bitmap: real per-pixel work, like a JPEG decode, but cheaper than the filter.
  /// - Parameters:
  ///   - payload: `ThumbnailPayload.gridSize`² RGB triples.
  ///   - side: the decoded bitmap's width and height in pixels.
  public convenience init(decoding payload: [UInt8], side: Int) {
    let grid = ThumbnailPayload.gridSize
    precondition(payload.count == grid * grid * 3, "a thumbnail payload has gridSize² RGB triples")
    // Fixed point, 8 fractional bits: positions in grid cells.
    let step = ((grid - 1) << 8) / max(1, side - 1)
    var pixels = [UInt8](repeating: 255, count: side * side * 4)
    pixels.withUnsafeMutableBufferPointer { out in
      payload.withUnsafeBufferPointer { cells in
        for y in 0..<side {
          let gy = y * step
          let y0 = min(gy >> 8, grid - 2)
          let fy = gy - (y0 << 8)
          for x in 0..<side {
            let gx = x * step
            let x0 = min(gx >> 8, grid - 2)
            let fx = gx - (x0 << 8)
            let base = (y0 * grid + x0) * 3
            let below = base + grid * 3
            let target = (y * side + x) * 4
            for channel in 0..<3 {
              let top = Int(cells[base + channel]) * (256 - fx) + Int(cells[base + 3 + channel]) * fx
              let bottom = Int(cells[below + channel]) * (256 - fx) + Int(cells[below + 3 + channel]) * fx
              out[target + channel] = UInt8(truncatingIfNeeded: (top * (256 - fy) + bottom * fy) >> 16)
            }
          }
        }
      }
    }
    self.init(width: side, height: side, pixels: pixels)
  }

  /// A decoded copy laid out for drawing (premultiplied alpha), like
  /// `UIImage.preparingForDisplay()`: caches keep these so a cell never decodes twice.
  public func preparedForDisplay() -> Image {
    var prepared = [UInt8](repeating: 0, count: pixels.count)
    prepared.withUnsafeMutableBufferPointer { target in
      pixels.withUnsafeBufferPointer { source in
        for index in stride(from: 0, to: source.count, by: 4) {
          let alpha = UInt16(source[index + 3])
          target[index] = UInt8(UInt16(source[index]) * alpha / 255)
          target[index + 1] = UInt8(UInt16(source[index + 1]) * alpha / 255)
          target[index + 2] = UInt8(UInt16(source[index + 2]) * alpha / 255)
          target[index + 3] = source[index + 3]
        }
      }
    }
    return Image(width: width, height: height, pixels: prepared)
  }
}

/// The wire format of a thumbnail: a small grid of RGB cells.
public enum ThumbnailPayload {
  public static let gridSize = 12
}
