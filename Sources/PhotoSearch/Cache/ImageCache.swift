import Foundation
import Synchronization

/// The name iOS gives its memory-warning notification; the app observes it like a UIKit app.
extension Notification.Name {
  public static let applicationDidReceiveMemoryWarning = Notification.Name(
    "UIApplicationDidReceiveMemoryWarningNotification")
}

/// Stores images in memory by key: the tutorial's `ImageCache`.
///
/// Thread-safe, because the fixed variant stores filtered images from worker threads.
public final class ImageCache: Sendable {
  /// The app-wide cache, like the tutorial's `ImageCache.shared`.
  public static let shared = ImageCache()

  private let images = Mutex<[String: Image]>([:])
  private let emptiesOnWarning = Mutex(false)
  // Written once in init, read in deinit: no concurrent access.
  private nonisolated(unsafe) var observer: (any NSObjectProtocol)?
  private let notificationCenter: NotificationCenter

  /// - Parameters:
  ///   - emptiesOnMemoryWarning: the fix: empty the cache on a memory warning. The starter
  ///     cache only ever adds.
  ///   - notificationCenter: where the memory warning is posted.
  public init(emptiesOnMemoryWarning: Bool = false, notificationCenter: NotificationCenter = .default) {
    self.notificationCenter = notificationCenter
    emptiesOnWarning.withLock { $0 = emptiesOnMemoryWarning }
    // queue nil: run on the posting thread so the cache is empty when post() returns.
    let token = notificationCenter.addObserver(
      forName: .applicationDidReceiveMemoryWarning, object: nil, queue: nil
    ) { [weak self] _ in
      self?.didReceiveMemoryWarning()
    }
    observer = token
  }

  /// Whether a memory warning empties the cache (the fix) or is ignored (the starter).
  public var emptiesOnMemoryWarning: Bool {
    get { emptiesOnWarning.withLock { $0 } }
    set { emptiesOnWarning.withLock { $0 = newValue } }
  }

  private func didReceiveMemoryWarning() {
    if emptiesOnMemoryWarning { removeAll() }
  }

  deinit {
    if let token = observer {
      notificationCenter.removeObserver(token)
    }
  }

  public func image(forKey key: String) -> Image? {
    images.withLock { $0[key] }
  }

  /// Caches the display-ready form of `image`, so the cache owns decoded bitmaps.
  public func set(_ image: Image, forKey key: String) {
    let prepared = image.preparedForDisplay()
    images.withLock { $0[key] = prepared }
  }

  public func removeAll() {
    images.withLock { $0.removeAll(keepingCapacity: false) }
  }

  public var count: Int { images.withLock { $0.count } }

  /// Bytes of pixel data held.
  public var byteCount: Int { images.withLock { $0.values.reduce(0) { $0 + $1.byteCount } } }

  /// Returns the cached thumbnail, or loads it from the service and caches it.
  public func loadThumbnail(for photoID: String, service: PhotoSearchService) -> Image {
    if let image = image(forKey: photoID) {
      return image
    }
    let image = service.loadThumbnail(forPhotoID: photoID)
    set(image, forKey: photoID)
    return self.image(forKey: photoID) ?? image
  }
}
