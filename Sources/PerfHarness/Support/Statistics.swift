/// The order statistics reports and benchmarks quote.
public enum Statistics {
  /// The median of `values` (the mean of the middle two for an even count); nan when empty.
  public static func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted.count % 2 == 1
      ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
  }

  /// The value at `fraction` (0...1) of `sorted`, nearest rank below; 0 when empty.
  public static func percentile<Value: BinaryInteger>(sorted: [Value], _ fraction: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * fraction))])
  }
}
