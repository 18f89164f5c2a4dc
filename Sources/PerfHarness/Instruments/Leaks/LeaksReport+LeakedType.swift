extension LeaksReport {
  /// Where the leaked blocks of one type are, for "why is it still alive?" asked of a type
  /// that leaked: the rings it lies on (numbered from 1, as the reports list them), and how
  /// many of it are root or indirect leaks.
  public struct LeakedType: Sendable {
    public struct Ring: Sendable {
      /// Its place in `cycles`, from 1.
      public var number: Int
      /// Blocks of the type on this ring, in all its instances.
      public var count: Int
      public var instances: Int
      /// "A → B → A", by unqualified type names.
      public var path: String
    }

    public var rings: [Ring] = []
    public var rootLeaks = 0
    public var indirectLeaks = 0
  }

  /// The leaked blocks whose type's name (or unqualified name) is `type`; nil when none leaked.
  public func leaked(_ type: String) -> LeakedType? {
    var result = LeakedType()
    for (index, cycle) in cycles.enumerated() {
      let members = cycle.nodes.filter { Self.names($0.type, type) }.count
      guard members > 0 else { continue }
      let path = (cycle.nodes + cycle.nodes.prefix(1)).map { Self.shortName($0.type) }.joined(separator: " → ")
      result.rings.append(
        LeakedType.Ring(number: index + 1, count: members * cycle.instances, instances: cycle.instances, path: path))
    }
    result.rootLeaks = rootLeaks.filter { Self.names($0.type, type) }.reduce(0) { $0 + $1.count }
    result.indirectLeaks = indirectLeaks.filter { Self.names($0.type, type) }.reduce(0) { $0 + $1.count }
    return result.rings.isEmpty && result.rootLeaks == 0 && result.indirectLeaks == 0 ? nil : result
  }

  /// Whether a reported type name is `type`: the whole name, its unqualified name, or, for
  /// "closure context", every "closure context (captures: …)".
  public static func names(_ name: String, _ type: String) -> Bool {
    let base = name.range(of: " (").map { String(name[..<$0.lowerBound]) } ?? name
    return base == type || base.hasSuffix("." + type)
  }

  private static func shortName(_ name: String) -> String {
    let base = name.range(of: " (").map { String(name[..<$0.lowerBound]) } ?? name
    let unqualified = base.split(separator: "<", maxSplits: 1).first.map(String.init) ?? base
    return unqualified.split(separator: ".").last.map(String.init) ?? unqualified
  }
}

extension LeaksReport.LeakedType {
  /// "LeakTwoA leaked: nothing reachable holds it", then a line per place it leaked:
  /// "116 leaked in cycle 1 (× 116): LeakTwoA → LeakTwoB → LeakTwoA".
  public func textLines(type: String) -> [String] {
    var lines = ["\(type) leaked: nothing reachable holds it"]
    for ring in rings {
      lines.append("  \(ring.count) leaked in cycle \(ring.number) (× \(ring.instances)): \(ring.path)")
    }
    if rootLeaks > 0 { lines.append("  \(rootLeaks) leaked as root leaks: no leaked block points to them") }
    if indirectLeaks > 0 {
      lines.append("  \(indirectLeaks) leaked as indirect leaks: held only by other leaked blocks")
    }
    return lines
  }
}
