import PerfHarness

/// Plain-text Call Tree and Top Functions, laid out like Instruments' detail panel:
/// `Weight` (ms and percent of the tree's total), `Self` (ms), then the symbol indented two
/// spaces per level with its `[module]`.
public enum CallTreeText {
  /// Renders `tree` to at most `maxDepth` levels (a row whose children are cut off ends in
  /// ` …`). Siblings under `minPercent` of the total, and beyond the heaviest `topN` (when set;
  /// roots included), fold into one `… N more` row carrying their summed weight.
  public static func render(_ tree: CallTree, maxDepth: Int = 12, minPercent: Double = 0.5, topN: Int? = nil) -> String
  {
    var output = header(tree) + "\n"
    output += pad("Weight", weightWidth) + "  " + pad("Self", msWidth) + "  Symbol\n"
    // Explicit stack rather than recursion: deep trees must not overflow the thread's stack.
    var work: [(rows: ArraySlice<CallTreeNode>, depth: Int)] = [(tree.roots[...], 0)]
    while let (rows, depth) = work.popLast() {
      // Slices keep their base array's indices, so startIndex is the row's rank among siblings.
      guard let row = rows.first else { continue }
      let rank = rows.startIndex
      let folded =
        percent(row.totalWeight, of: tree.totalWeight) < minPercent
        || topN.map { rank >= $0 } ?? false
      if folded {
        // Siblings are heaviest first, so every later one folds too.
        let weight = rows.reduce(0) { $0 + $1.totalWeight }
        output +=
          weightColumns(weight, tree.totalWeight) + "  " + pad("", msWidth) + "  "
          + indent(depth) + "… \(rows.count) more\n"
        continue
      }
      let cut = depth + 1 >= maxDepth && !row.children.isEmpty
      output +=
        weightColumns(row.totalWeight, tree.totalWeight) + "  " + pad(ms(row.selfWeight), msWidth) + "  "
        + indent(depth) + symbol(name: row.name, module: row.module) + (cut ? " …" : "") + "\n"
      work.append((rows.dropFirst(), depth))
      if !cut { work.append((row.children[...], depth + 1)) }
    }
    return output
  }

  /// Renders the first `limit` rows of Top Functions: `Self` and `Total` in ms and percent.
  public static func renderTopFunctions(_ functions: [FunctionWeight], limit: Int) -> String {
    var output = pad("Self", weightWidth) + "  " + pad("Total", weightWidth) + "  Symbol\n"
    for function in functions.prefix(max(0, limit)) {
      output +=
        pad(ms(function.selfWeight), msWidth) + " " + pad(fixed(function.selfPercent) + "%", percentWidth)
        + "  " + pad(ms(function.totalWeight), msWidth) + " " + pad(fixed(function.totalPercent) + "%", percentWidth)
        + "  " + symbol(name: function.symbol, module: function.module) + "\n"
    }
    if functions.count > limit {
      output += pad("", weightWidth) + "  " + pad("", weightWidth) + "  … \(functions.count - max(0, limit)) more\n"
    }
    return output
  }

  private static let msWidth = 11
  private static let percentWidth = 7
  private static let weightWidth = msWidth + 1 + percentWidth

  private static func header(_ tree: CallTree) -> String {
    var enabled: [String] = []
    if tree.options.separateByThread { enabled.append("separate by thread") }
    if tree.options.invert { enabled.append("inverted") }
    if tree.options.hideSystemLibraries { enabled.append("hide system libraries") }
    if tree.options.flattenRecursion { enabled.append("flatten recursion") }
    if tree.options.topFunctions { enabled.append("top functions") }
    let options = enabled.isEmpty ? "" : " (" + enabled.joined(separator: ", ") + ")"
    let samples = tree.sampleCount == 1 ? "1 sample" : "\(tree.sampleCount) samples"
    return "Call Tree\(options): \(ms(tree.totalWeight)) in \(samples)"
  }

  private static func weightColumns(_ weight: Double, _ total: Double) -> String {
    pad(ms(weight), msWidth) + " " + pad(fixed(percent(weight, of: total)) + "%", percentWidth)
  }

  private static func percent(_ part: Double, of total: Double) -> Double {
    total > 0 ? part / total * 100 : 0
  }

  private static func symbol(name: String, module: String) -> String {
    module.isEmpty ? name : "\(name) [\(module)]"
  }

  private static func indent(_ depth: Int) -> String {
    String(repeating: " ", count: 2 * depth)
  }

  private static func ms(_ value: Double) -> String { fixed(value) + " ms" }

  /// One decimal, without Foundation's locale-dependent formatting.
  static func fixed(_ value: Double) -> String {
    guard value.isFinite else { return value.isNaN ? "nan" : (value < 0 ? "-inf" : "inf") }
    let tenths = (abs(value) * 10).rounded()
    guard tenths < 9e17 else { return String(value) }
    let scaled = Int(tenths)
    return (value < 0 && scaled != 0 ? "-" : "") + "\(scaled / 10).\(scaled % 10)"
  }

  private static func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
  }
}
