import Foundation
import PerfHarness
import Testing

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

  func run(_ arguments: [String], in directory: URL? = nil, environment: [String: String] = [:]) throws -> Result {
    try start(arguments, in: directory, environment: environment).wait()
  }

  /// Starts the executable; `wait()` collects its result.
  func start(_ arguments: [String], in directory: URL? = nil, environment: [String: String] = [:]) throws -> Running {
    let process = Process()
    process.executableURL = url
    process.arguments = arguments
    if let directory { process.currentDirectoryURL = directory }
    if !environment.isEmpty {
      process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    }
    return try Running(process, arguments: arguments)
  }

  /// A started executable whose stdout and stderr are read on threads of their own: read
  /// one after the other, a child filling the second pipe would block before closing the
  /// first.
  final class Running: @unchecked Sendable {
    let process: Process
    private let arguments: [String]
    private let lock = NSLock()
    private var output = Data()
    private var error = Data()
    private let done = DispatchGroup()

    fileprivate init(_ process: Process, arguments: [String]) throws {
      self.process = process
      self.arguments = arguments
      let outputPipe = Pipe()
      let errorPipe = Pipe()
      process.standardOutput = outputPipe
      process.standardError = errorPipe
      try process.run()
      for (handle, isError) in [(outputPipe.fileHandleForReading, false), (errorPipe.fileHandleForReading, true)] {
        done.enter()
        Thread {
          while case let chunk = handle.availableData, !chunk.isEmpty {
            self.lock.withLock {
              if isError { self.error.append(chunk) } else { self.output.append(chunk) }
            }
          }
          self.done.leave()
        }.start()
      }
    }

    var pid: Int32 { process.processIdentifier }

    /// What it has written to stderr so far.
    var standardErrorSoFar: String { lock.withLock { String(decoding: error, as: UTF8.self) } }

    /// Waits, at most `seconds`, until stderr contains `text`.
    func waitForStandardError(containing text: String, seconds: Double = 120) -> Bool {
      let end = Date(timeIntervalSinceNow: seconds)
      while Date() < end {
        if standardErrorSoFar.contains(text) { return true }
        if !process.isRunning { return standardErrorSoFar.contains(text) }
        usleep(10_000)
      }
      return false
    }

    /// Waits at most `seconds`; a process still running then is killed, and nil returned:
    /// for a test whose failure would otherwise be a hang.
    func wait(atMost seconds: Double) throws -> Result? {
      let end = Date(timeIntervalSinceNow: seconds)
      while process.isRunning && Date() < end { usleep(10_000) }
      guard process.isRunning else { return try wait() }
      kill(process.processIdentifier, SIGKILL)
      _ = try wait()
      return nil
    }

    func wait() throws -> Result {
      process.waitUntilExit()
      done.wait()
      // Every report a test makes is checked against the published JSON Schema.
      if let flag = arguments.firstIndex(of: "--output"), flag + 1 < arguments.count {
        try ReportSchema.validateReports(under: URL(fileURLWithPath: arguments[flag + 1]))
      }
      return lock.withLock {
        Result(
          status: process.terminationStatus, standardOutput: String(decoding: output, as: UTF8.self),
          standardError: String(decoding: error, as: UTF8.self))
      }
    }
  }
}

extension BuiltBinary {
  /// The processes whose command line, its arguments joined by spaces, is `commandLine`.
  static func processIDs(commandLine: String) throws -> [Int32] {
    try FileManager.default.contentsOfDirectory(atPath: "/proc").compactMap { entry in
      guard let pid = Int32(entry),
        let raw = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline"), !raw.isEmpty
      else { return nil }
      let arguments = raw.split(separator: 0, omittingEmptySubsequences: false).dropLast()
      return arguments.map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ") == commandLine ? pid : nil
    }
  }

  /// Runs one starter scenario with the Time Profiler and Allocations into a temporary
  /// folder; the report is the one written there.
  func runScenario(_ scenario: String, _ extra: [String] = []) throws -> (Result, Report) {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let result = try run(
      ["scenario", scenario, "--instruments", "time,allocations", "--output", directory.path] + extra)
    let file = directory.appendingPathComponent("\(scenario)/starter/report.json")
    return (result, try JSONDecoder().decode(Report.self, from: Data(contentsOf: file)))
  }
}

/// A fresh temporary directory, removed by the caller.
/// Whether `compiler` builds the C file `source` into `output` with `flags` (after the
/// source, so libraries link): the toolchain's clang unless a test asks for Debian's cc.
func buildsC(_ source: URL, flags: [String], to output: URL, compiler: String = "clang") -> Bool {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
  process.arguments = [compiler, source.path, "-o", output.path] + flags
  guard (try? process.run()) != nil else { return false }
  process.waitUntilExit()
  return process.terminationStatus == 0
}

/// Builds the C file `source` into `output` with the toolchain's clang (CI has no other
/// compiler) and `flags`.
func compileC(_ source: URL, flags: [String], to output: URL) throws {
  try #require(buildsC(source, flags: flags, to: output), "clang could not build \(source.lastPathComponent) \(flags)")
}

func temporaryDirectory() throws -> URL {
  let url = FileManager.default.temporaryDirectory.appendingPathComponent("perfharness-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  return url
}

/// Validates reports against Sources/PerfReports/Schema/report-v1.schema.json with
/// Python's jsonschema (installed by `make setup`).
enum ReportSchema {
  static let schema = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().appendingPathComponent("Sources/PerfReports/Schema/report-v1.schema.json")

  struct Violation: Error, CustomStringConvertible {
    var description: String
  }

  static func validateReports(under directory: URL) throws {
    let script = """
      import json, sys, pathlib, jsonschema
      schema = json.load(open(sys.argv[1]))
      validator = jsonschema.Draft202012Validator(schema)
      bad = 0
      for path in sorted(pathlib.Path(sys.argv[2]).rglob("report.json")):
          for error in validator.iter_errors(json.load(open(path))):
              bad += 1
              print(f"{path}: {'/'.join(map(str, error.absolute_path))}: {error.message[:200]}")
      sys.exit(1 if bad else 0)
      """
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", script, schema.path, directory.path]
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    try process.run()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
      throw Violation(description: "reports do not match the JSON Schema (make setup installs jsonschema):\n\(text)")
    }
  }
}
