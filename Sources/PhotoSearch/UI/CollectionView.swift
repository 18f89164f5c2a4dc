/// Supplies cells, like `UICollectionViewDataSource`.
@MainActor
public protocol CollectionViewDataSource: AnyObject {
  func numberOfItems(in collectionView: CollectionView) -> Int
  func collectionView(_ collectionView: CollectionView, cellForItemAt item: Int)
    -> SearchResultsCollectionViewCell
}

/// A grid of reusable cells scrolled row by row: the headless `UICollectionView`.
///
/// Like UIKit it owns every cell it created (visible ones and the reuse queue) and holds its
/// data source weakly.
@MainActor
public final class CollectionView {
  public weak var dataSource: (any CollectionViewDataSource)?
  public let columns: Int
  public let visibleRows: Int
  public private(set) var firstVisibleRow = 0
  public private(set) var visibleCells: [Int: SearchResultsCollectionViewCell] = [:]
  private var reuseQueue: [SearchResultsCollectionViewCell] = []
  /// How many cells were ever created.
  public private(set) var createdCellCount = 0

  public init(columns: Int = 3, visibleRows: Int = 5) {
    self.columns = columns
    self.visibleRows = visibleRows
  }

  public var numberOfItems: Int { dataSource?.numberOfItems(in: self) ?? 0 }
  public var numberOfRows: Int { (numberOfItems + columns - 1) / columns }
  public var allCells: [SearchResultsCollectionViewCell] { Array(visibleCells.values) + reuseQueue }

  public func dequeueReusableCell() -> SearchResultsCollectionViewCell {
    if let cell = reuseQueue.popLast() {
      cell.prepareForReuse()
      return cell
    }
    createdCellCount += 1
    return SearchResultsCollectionViewCell()
  }

  public func reloadData() {
    for (_, cell) in visibleCells { reuseQueue.append(cell) }
    visibleCells.removeAll()
    layoutVisibleCells()
  }

  /// Reconfigures the given items, as `reloadItems(at:)` does.
  public func reloadItems(at items: [Int]) {
    for item in items where visibleCells[item] != nil {
      reuseQueue.append(visibleCells.removeValue(forKey: item)!)
      configureCell(forItem: item)
    }
  }

  /// Scrolls so that `row` is the first visible row; cells that scroll out are reused.
  public func scroll(toRow row: Int) {
    firstVisibleRow = max(0, min(row, max(0, numberOfRows - visibleRows)))
    layoutVisibleCells()
  }

  public var visibleItems: Range<Int> {
    let start = firstVisibleRow * columns
    return start..<min(numberOfItems, start + visibleRows * columns)
  }

  private func layoutVisibleCells() {
    let visible = visibleItems
    for item in visibleCells.keys.sorted() where !visible.contains(item) {
      reuseQueue.append(visibleCells.removeValue(forKey: item)!)
    }
    for item in visible where visibleCells[item] == nil {
      configureCell(forItem: item)
    }
  }

  private func configureCell(forItem item: Int) {
    guard let dataSource else { return }
    visibleCells[item] = dataSource.collectionView(self, cellForItemAt: item)
  }
}
