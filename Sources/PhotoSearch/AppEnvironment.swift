import Dispatch

/// What every screen of one running app shares.
@MainActor
struct AppEnvironment {
  let variant: AppVariant
  let service: PhotoSearchService
  let imageCache: ImageCache
  let backgroundWork: BackgroundWork
}

/// Counts work sent to worker threads whose result has not reached the main thread yet,
/// so a driver can wait for the app to settle like a UI test waits for idle.
@MainActor
final class BackgroundWork {
  private(set) var pending = 0
  /// Left by each worker block after Dispatch released it (and what it captured).
  let workers = DispatchGroup()
  func begin() { pending += 1 }
  func end() { pending -= 1 }
}
