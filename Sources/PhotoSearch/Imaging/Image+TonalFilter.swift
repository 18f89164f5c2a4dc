#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

extension Image {
  /// A monochrome tonal rendition, like Core Image's `CIPhotoEffectTonal`: luminance,
  /// then a filmic tone curve with gentle local contrast.
  ///
  /// Deliberately real per-pixel floating-point work: on the main thread it dominates a
  /// frame, which is what the Time Profiler has to find.
  /// - Returns: a new image of the same size.
  public func applyTonalFilter() -> Image {
    var output = [UInt8](repeating: 0, count: pixels.count)
    output.withUnsafeMutableBufferPointer { output in
      pixels.withUnsafeBufferPointer { source in
        for index in stride(from: 0, to: source.count, by: 4) {
          let r = Float(source[index]) / 255
          let g = Float(source[index + 1]) / 255
          let b = Float(source[index + 2]) / 255
          // Rec. 709 luminance in linear light.
          let linear = 0.2126 * powf(r, 2.2) + 0.7152 * powf(g, 2.2) + 0.0722 * powf(b, 2.2)
          let toned = Image.toneCurve(linear)
          let value = UInt8(max(0, min(255, (powf(toned, 1 / 2.2) * 255).rounded())))
          output[index] = value
          output[index + 1] = value
          output[index + 2] = value
          output[index + 3] = source[index + 3]
        }
      }
    }
    return Image(width: width, height: height, pixels: output)
  }

  /// A filmic S-curve (Hable's operator), normalised so that white stays white.
  static func toneCurve(_ x: Float) -> Float {
    func hable(_ v: Float) -> Float {
      let a: Float = 0.15
      let b: Float = 0.50
      let c: Float = 0.10
      let d: Float = 0.20
      let e: Float = 0.02
      let f: Float = 0.30
      return ((v * (a * v + c * b) + d * e) / (v * (a * v + b) + d * f)) - e / f
    }
    let exposure: Float = 2.0
    return min(1, hable(x * exposure) / hable(exposure))
  }
}
