import Foundation

/// Where a report was recorded: enough to tell whether two reports are comparable.
public struct RunEnvironment: Codable, Sendable {
  public var swiftVersion: String
  public var os: String
  public var cpu: String
  public var cpuCount: Int
  public var buildConfiguration: String

  /// The environment of this process.
  public static func current() -> RunEnvironment {
    RunEnvironment(
      swiftVersion: compilerVersion, os: operatingSystem(), cpu: cpuModel(),
      cpuCount: ProcessInfo.processInfo.activeProcessorCount, buildConfiguration: buildConfiguration)
  }

  private static var compilerVersion: String {
    #if compiler(>=6.5)
      return "6.5 or later"
    #elseif compiler(>=6.4)
      return "6.4"
    #elseif compiler(>=6.3)
      return "6.3"
    #else
      return "older than 6.3"
    #endif
  }

  private static var buildConfiguration: String {
    #if DEBUG
      return "debug"
    #else
      return "release"
    #endif
  }

  private static func operatingSystem() -> String {
    let release = (try? String(contentsOfFile: "/etc/os-release", encoding: .utf8)) ?? ""
    let pretty = release.split(separator: "\n").first { $0.hasPrefix("PRETTY_NAME=") }
      .map { $0.dropFirst("PRETTY_NAME=".count).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
    var system = utsname()
    uname(&system)
    let kernel = withUnsafeBytes(of: &system.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    return [pretty ?? "Linux", "kernel \(kernel)"].joined(separator: ", ")
  }

  private static func cpuModel() -> String {
    let info = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
    let line = info.split(separator: "\n").first { $0.hasPrefix("model name") }
    return line.flatMap { $0.split(separator: ":", maxSplits: 1).last }
      .map { $0.trimmingCharacters(in: .whitespaces) } ?? "unknown"
  }
}
