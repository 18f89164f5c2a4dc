import Testing

@testable import PhotoSearch

@Suite("Search corpus and imaging")
struct ImagingTests {
  @Test("the same term finds the same 60-120 photos")
  @MainActor
  func deterministicSearch() {
    let service = PhotoSearchService()
    let first = service.search(for: "dog")
    let second = service.search(for: "dog")
    #expect((60...120).contains(first.photos.count))
    #expect(first.photos.map(\.id) == second.photos.map(\.id))
    #expect(first.photos.map(\.id) != service.search(for: "cat").photos.map(\.id))
  }

  @Test("thumbnails are deterministic RGBA bitmaps of at least 150x150")
  func thumbnails() {
    let service = PhotoSearchService()
    let image = service.loadThumbnail(forPhotoID: "dog-1-abc")
    #expect(image.width >= 150 && image.height >= 150)
    #expect(image.pixels.count == image.width * image.height * 4)
    #expect(image.pixels == service.loadThumbnail(forPhotoID: "dog-1-abc").pixels)
    #expect(image.pixels != service.loadThumbnail(forPhotoID: "dog-2-abc").pixels)
  }

  @Test("the tonal filter is deterministic, monochrome and keeps alpha")
  func tonalFilter() {
    let image = PhotoSearchService().loadThumbnail(forPhotoID: "cat-7-ff")
    let once = image.applyTonalFilter()
    #expect(once.pixels == image.applyTonalFilter().pixels)
    #expect(once.pixels != image.pixels)
    for index in stride(from: 0, to: once.pixels.count, by: 4) {
      #expect(once.pixels[index] == once.pixels[index + 1] && once.pixels[index] == once.pixels[index + 2])
      #expect(once.pixels[index + 3] == image.pixels[index + 3])
    }
    // Brighter input never gives darker output: the tone curve is monotonic.
    let curve = stride(from: Float(0), through: 1, by: 0.01).map(Image.toneCurve)
    #expect(zip(curve, curve.dropFirst()).allSatisfy { $0 <= $1 })
    #expect(abs(Image.toneCurve(1) - 1) < 0.001)
    #expect(Image.toneCurve(0) < 0.01)
  }
}
