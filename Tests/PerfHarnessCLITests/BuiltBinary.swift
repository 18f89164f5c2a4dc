import Foundation

/// Runs a built executable of this package, as a user would from the shell.
struct BuiltBinary {
  struct Result {
    var status: Int32
    var standardOutput: String
    var standardError: String
  }

  let url: URL

  /// The executable `name` in the build products folder that holds the test bundle.
  init(_ name: String) throws {
    var folder = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    while !folder.path.isEmpty && folder.path != "/" {
      folder = folder.deletingLastPathComponent()
      let candidate = folder.appendingPathComponent(name)
      if FileManager.default.isExecutableFile(atPath: candidate.path) {
        url = candidate
        return
      }
    }
    throw MissingBinary(name: name)
  }

  struct MissingBinary: Error, CustomStringConvertible {
    var name: String
    var description: String { "\(name) is not built: run `swift build` before `swift test` (make test does)" }
  }

  func run(_ arguments: [String], in directory: URL? = nil) throws -> Result {
    let process = Process()
    process.executableURL = url
    process.arguments = arguments
    if let directory { process.currentDirectoryURL = directory }
    let output = Pipe()
    let error = Pipe()
    process.standardOutput = output
    process.standardError = error
    try process.run()
    // Read before waiting, so a full pipe cannot block the child.
    let outData = output.fileHandleForReading.readDataToEndOfFile()
    let errData = error.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return Result(
      status: process.terminationStatus, standardOutput: String(decoding: outData, as: UTF8.self),
      standardError: String(decoding: errData, as: UTF8.self))
  }
}

/// A fresh temporary directory, removed by the caller.
func temporaryDirectory() throws -> URL {
  let url = FileManager.default.temporaryDirectory.appendingPathComponent("perfharness-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  return url
}
