// The PhotoSearch app's observable outputs, for Tests/PhotoSearchTests/MeasuringChangesNothingTests:
// `photosearch-outputs plain FILE` drives the app without the harness; `photosearch-outputs
// scenario observable-outputs ...` drives it the same way under the instruments and writes
// to $PHOTOSEARCH_OUTPUTS. The test asks for the same text from both.
import Foundation
import PerfHarness
import PerfHarnessCLI
import PhotoSearch

/// FNV-1a: a checksum of pixels that any changed byte changes.
func checksum(_ bytes: [UInt8]) -> UInt64 {
  var hash: UInt64 = 0xcbf2_9ce4_8422_2325
  for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
  return hash
}

func describe(_ image: Image?) -> String {
  guard let image else { return "none" }
  return "\(image.width)x\(image.height):\(String(checksum(image.pixels), radix: 16))"
}

/// Drives both variants through searches, drill-downs, scrolling, hearts, going back and a
/// memory warning, and writes down everything a user or the app's own tests could observe.
@MainActor
func observableOutputs() -> String {
  var lines: [String] = []
  for variant in AppVariant.allCases {
    let center = NotificationCenter()
    let cache = ImageCache(notificationCenter: center)
    let app = PhotoSearchApp(variant: variant, imageCache: cache, service: PhotoSearchService(thumbnailSide: 24))
    var allResults: [SearchResults] = []
    for term in ["dog", "cat", "owl"] {
      let results = app.search(term)
      allResults.append(results)
      lines.append(
        "\(variant) search \(term): \(results.photos.count) photos, first \(results.photos.first?.id ?? "-")")
    }
    for index in 0..<3 {
      let controller = app.openSearch(at: index)
      app.toggleHeart(onVisibleCell: 0)
      app.toggleHeart(onVisibleCell: 2)
      app.scrollResultsDownAndUp()
      app.waitUntilIdle()
      let collection = controller.collectionView
      lines.append(
        "\(variant) open \(index): title \(controller.title), top \(app.navigationController.viewControllers.count), "
          + "rows \(collection.numberOfRows), first row \(collection.firstVisibleRow), visible \(collection.visibleItems), "
          + "cells created \(collection.createdCellCount)")
      for item in collection.visibleItems.sorted() {
        let cell = collection.visibleCells[item]
        lines.append(
          "  item \(item): photo \(cell?.photo?.id ?? "-") favourite \(cell?.photo?.isFavourite ?? false) "
            + "image \(describe(cell?.imageView.image))")
      }
      app.goBack()
      lines.append("\(variant) back: top \(app.navigationController.viewControllers.count)")
    }
    func cacheContents() -> [String] {
      allResults.flatMap(\.photos).flatMap { photo in
        [photo.id, photo.filteredCacheKey].compactMap { key in
          cache.image(forKey: key).map { "  \(key) \(describe($0))" }
        }
      }
    }
    lines.append("\(variant) cache: \(cache.count) images, \(cache.byteCount) bytes")
    lines += cacheContents()
    center.post(name: .applicationDidReceiveMemoryWarning, object: nil)
    lines.append("\(variant) after memory warning: \(cache.count) images, \(cache.byteCount) bytes")
    lines += cacheContents()
    lines.append("\(variant) favourites: \(allResults.flatMap(\.photos).filter(\.isFavourite).map(\.id))")
  }
  return lines.joined(separator: "\n") + "\n"
}

/// Where C++ exceptions and every other `_Unwind_*` caller resolve: libgcc_s unless the
/// harness's link swapped in libunwind's (docs/design.md, "Linking"). The global lookup that
/// dlsym(RTLD_DEFAULT) does is the one every library's undefined `_Unwind_*` binds through.
func unwinderLibrary() -> String {
  guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "_Unwind_RaiseException") else {
    return "unresolved"
  }
  return mappedFile(containing: UInt(bitPattern: symbol)) ?? "unknown"
}

/// The file mapped at `address`, from /proc/self/maps (Glibc's module does not import dladdr).
func mappedFile(containing address: UInt) -> String? {
  // /proc files report size 0: read to the end rather than by size.
  guard let handle = FileHandle(forReadingAtPath: "/proc/self/maps") else { return nil }
  let maps = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
  for line in maps.split(separator: "\n") {
    let fields = line.split(separator: " ", omittingEmptySubsequences: true)
    let range = fields.first?.split(separator: "-").compactMap { UInt($0, radix: 16) } ?? []
    if range.count == 2, (range[0]..<range[1]).contains(address), fields.count >= 6 { return String(fields[5]) }
  }
  return nil
}

func write(_ text: String, to path: String) throws {
  try Data(text.utf8).write(to: URL(fileURLWithPath: path))
}

struct MissingOutputPath: Error, CustomStringConvertible {
  var description: String { "set PHOTOSEARCH_OUTPUTS to the file the outputs go to" }
}

let outputs = Scenario(
  "observable-outputs", summary: "the PhotoSearch app's observable outputs, for comparison with a plain run",
  variants: [.starter], defaultIterations: 1
) { context in
  guard let path = ProcessInfo.processInfo.environment["PHOTOSEARCH_OUTPUTS"] else { throw MissingOutputPath() }
  let text = context.step("drive the app") { observableOutputs() }
  try write(text + "unwinder: \(unwinderLibrary())\n", to: path)
}

let arguments = CommandLine.arguments
if arguments.count == 3, arguments[1] == "plain" {
  let text = MainActor.assumeIsolated { observableOutputs() }
  do {
    try write(text + "unwinder: \(unwinderLibrary())\n", to: arguments[2])
  } catch {
    FileHandle.standardError.write(Data("cannot write \(arguments[2]): \(error)\n".utf8))
    exit(1)
  }
} else {
  PerfHarnessCLI.main(scenarios: [outputs])
}
