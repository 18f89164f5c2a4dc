extension HTMLReport {
  /// The page's CSS, `Resources/report.css`. System frames are grey, as in Instruments; colours
  /// carry meaning only together with text (passed/failed badges say so in words).
  static let styles = HTMLAsset.inlined(PackageResources.report_css)

  /// The page's script: plain ES2017 in one function scope, no modules and nothing loaded
  /// from elsewhere. The files of `Resources` are joined in this order; the last one draws the page:
  /// - `core.js`: error capture, the embedded data, formatting helpers, the summary and
  ///   comparison sections;
  /// - `call-tree.js`: the call tree model, the same option semantics as `CallTree` in
  ///   PerfHarness, over the profile's recorded stacks, with rows built only when expanded;
  /// - `call-tree-view.js`: the Call Tree panel, option toggles, search, expandable rows and the
  ///   flame graph;
  /// - `memory.js`: the allocations (categories, generations, live heap chart) and leaks (cycle
  ///   graphs, leak tables) sections;
  /// - `main.js`: draws the sections in order, records the render time and runs the `#selftest`
  ///   hook.
  static let script =
    "(function () {\n"
    + [
      PackageResources.core_js, PackageResources.call_tree_js, PackageResources.call_tree_view_js,
      PackageResources.memory_js, PackageResources.main_js,
    ].map(HTMLAsset.inlined).joined() + "})();"
}

/// The pages' styles, scripts and skeleton are the files of `HTML/Resources`, so that they read
/// (and lint) as CSS, JavaScript and HTML. SwiftPM embeds them in the code (`.embedInCode` in
/// Package.swift) as the bytes `PackageResources.<file name, "." and "-" as "_">`: no resource
/// bundle to find at run time, in this package or in one that depends on it.
enum HTMLAsset {
  /// A file as a whole, for a template.
  static func text(_ file: [UInt8]) -> String {
    String(decoding: file, as: UTF8.self)
  }

  /// A file as it goes inside a page's `<style>` or `<script>` element: without the newline that
  /// ends the file (the page's skeleton puts its own line breaks around it).
  static func inlined(_ file: [UInt8]) -> String {
    String(decoding: file.last == UInt8(ascii: "\n") ? file.dropLast() : file[...], as: UTF8.self)
  }
}
