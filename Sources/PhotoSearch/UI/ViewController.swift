/// A screen: the headless counterpart of `UIViewController`.
@MainActor
open class ViewController {
  public var title: String
  public private(set) var isViewLoaded = false

  public init(title: String) {
    self.title = title
  }

  /// Called once, the first time the controller is shown.
  open func viewDidLoad() {}

  func loadViewIfNeeded() {
    guard !isViewLoaded else { return }
    isViewLoaded = true
    viewDidLoad()
  }
}

/// A stack of screens: the headless counterpart of `UINavigationController`.
@MainActor
public final class NavigationController {
  public private(set) var viewControllers: [ViewController]

  public init(rootViewController: ViewController) {
    viewControllers = [rootViewController]
    rootViewController.loadViewIfNeeded()
  }

  public var topViewController: ViewController? { viewControllers.last }

  public func pushViewController(_ viewController: ViewController) {
    viewControllers.append(viewController)
    viewController.loadViewIfNeeded()
  }

  /// Pops the top screen; the navigation controller no longer holds it afterwards.
  @discardableResult
  public func popViewController() -> ViewController? {
    guard viewControllers.count > 1 else { return nil }
    return viewControllers.removeLast()
  }
}
