import Foundation
import Glibc
import PerfHarness
import Testing

@testable import PerfHarnessCLI

/// Everything the harness reads has a size cap, refused with a clear error before it is
/// read whole; the scenario's output keeps its tail and counts the rest.
@Suite("Bounded inputs")
struct BoundedInputTests {
  let fixtures = try! BuiltBinary("perfharness-fixtures")

  @Test("a thresholds file over 1 MiB is refused before it is parsed: exit 64, naming the file and the cap")
  func largeThresholds() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let file = directory.appendingPathComponent("completes.yaml")
    // Valid YAML all the way: only its size is wrong.
    let line = "max-leaked-bytes: 0\n" + String(repeating: "# padding\n", count: 1000)
    try Data(String(repeating: line, count: 120).utf8).write(to: file)
    let result = try fixtures.run([
      "scenario", "completes", "--check", "--thresholds", directory.path, "--output",
      directory.appendingPathComponent("out").path,
    ])
    #expect(result.status == 64, "\(result.standardError)")
    #expect(result.standardError.contains(file.path), "\(result.standardError)")
    #expect(result.standardError.contains("larger than 1.0 MiB; accepted: a thresholds file of at most 1.0 MiB"))
  }

  @Test("a suppressions file over 1 MiB is refused: exit 64")
  func largeSuppressions() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let file = directory.appendingPathComponent("suppressions.txt")
    try Data(String(repeating: "# padding line\n", count: 80_000).utf8).write(to: file)
    let result = try fixtures.run([
      "scenario", "completes", "--instruments", "leaks", "--suppressions", file.path, "--output", directory.path,
    ])
    #expect(result.status == 64, "\(result.standardError)")
    #expect(result.standardError.contains("\(file.path) is larger than 1.0 MiB"), "\(result.standardError)")
  }

  /// The child reads the recording settings the parent wrote; they carry the parsed
  /// patterns, several times the file's size, and were cut off at the suppressions' own cap.
  @Test("a suppressions file just under its cap reaches the scenario's child whole and matches there")
  func suppressionsNearTheCap() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let file = directory.appendingPathComponent("suppressions.txt")
    var text = ""
    var index = 0
    while text.utf8.count < BoundedFile.settingsLimit - 100 {
      text += ["type:App.Unused\(index)\n", "stack:*unused\(index)\n", "type:Nothing\(index).*\n"][index % 3]
      index += 1
    }
    // Last, so the child must have read every pattern before it.
    text += "type:*\n"
    try Data(text.utf8).write(to: file)
    let output = directory.appendingPathComponent("reports")
    let run = try BuiltBinary("perfharness").run([
      "scenario", "closure-retain-cycles", "--iterations", "2", "--instruments", "allocations,leaks",
      "--suppressions", file.path, "--output", output.path,
    ])
    #expect(run.status == 0, "\(run.standardError)")
    let report = try JSONDecoder().decode(
      Report.self,
      from: Data(contentsOf: output.appendingPathComponent("closure-retain-cycles/starter/report.json")))
    #expect((report.leaks?.suppressedCount ?? 0) > 0)
    #expect(report.leaks?.leakedCount == 0)
  }

  @Test("a report over 256 MiB is refused without being read: exit 1 for report and compare, 64 for --baseline")
  func largeReport() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    // Sparse: 300 MiB that take no disk, all of which a reader without a cap would load.
    let big = directory.appendingPathComponent("completes/starter/report.json")
    try FileManager.default.createDirectory(at: big.deletingLastPathComponent(), withIntermediateDirectories: true)
    #expect(FileManager.default.createFile(atPath: big.path, contents: nil))
    let handle = try FileHandle(forWritingTo: big)
    try handle.truncate(atOffset: 300 << 20)
    try handle.close()
    let perfharness = try BuiltBinary("perfharness")
    for (arguments, status) in [
      (["report", big.path], Int32(1)), (["compare", big.path, big.path], 1),
    ] {
      let result = try perfharness.run(arguments)
      #expect(result.status == status, "\(arguments) \(result.standardError)")
      #expect(result.standardError.contains("\(big.path) is larger than 256.0 MiB"), "\(result.standardError)")
    }
    let baseline = try fixtures.run([
      "scenario", "completes", "--baseline", directory.path, "--output", directory.appendingPathComponent("out").path,
    ])
    #expect(baseline.status == 64, "\(baseline.standardError)")
    #expect(baseline.standardError.contains("is larger than 256.0 MiB"), "\(baseline.standardError)")
  }

  /// What a file input may be instead of a regular file. A FIFO with no writer blocked the
  /// harness in open() forever; /dev/zero was read to the size cap.
  enum SpecialFile: String, CaseIterable, Sendable {
    case fifo, device, folder, socket

    var kind: String {
      switch self {
      case .fifo: "a FIFO"
      case .device: "a character device"
      case .folder: "a folder"
      case .socket: "a socket"
      }
    }

    func make(at path: String) throws {
      switch self {
      case .fifo: #expect(mkfifo(path, 0o600) == 0)
      case .device: try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/dev/zero")
      case .folder: try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
      case .socket:
        let descriptor = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8CString)
        #expect(bytes.count <= MemoryLayout.size(ofValue: address.sun_path))
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
          bytes.withUnsafeBytes { raw.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0.prefix(raw.count))) }
        }
        let bound = withUnsafePointer(to: &address) {
          $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
          }
        }
        #expect(bound == 0)
      }
    }
  }

  /// Every file the harness reads from its arguments, and the exit status a file it cannot
  /// take gets there (README, "Exit codes": 1 for a report that cannot be read, 64 for an
  /// option's bad value).
  enum FileInput: String, CaseIterable, Sendable {
    case report, compareBase, compareNew, baselineFile, baselineInFolder, suppressions, thresholdsFile
    case thresholdsFolder, recordBaseline

    var status: Int32 { [.report, .compareBase, .compareNew].contains(self) ? 1 : 64 }

    /// Where the special file goes in `directory`, and the arguments that hand it over.
    func arguments(in directory: URL, goodReport: String) -> (path: String, arguments: [String]) {
      let special = directory.appendingPathComponent("special").path
      let output = ["--output", directory.appendingPathComponent("out").path]
      switch self {
      case .report: return (special, ["report", special])
      case .compareBase: return (special, ["compare", special, goodReport])
      case .compareNew: return (special, ["compare", goodReport, special])
      case .baselineFile: return (special, ["scenario", "completes", "--baseline", special] + output)
      case .baselineInFolder:
        let file = directory.appendingPathComponent("completes/starter/report.json").path
        return (file, ["scenario", "completes", "--baseline", directory.path] + output)
      case .suppressions:
        return (special, ["scenario", "completes", "--instruments", "leaks", "--suppressions", special] + output)
      case .thresholdsFile:
        let file = directory.appendingPathComponent("completes.yaml").path
        return (file, ["scenario", "completes", "--check", "--thresholds", directory.path] + output)
      case .thresholdsFolder:
        return (special, ["scenario", "completes", "--check", "--no-cycles", "--thresholds", special] + output)
      case .recordBaseline: return (special, ["record", "--baseline", special, "--", "/bin/true"])
      }
    }
  }

  /// A report of `completes` that every command accepts, made once.
  static let goodReport: String = {
    let directory = try! temporaryDirectory()
    let run = try! BuiltBinary("perfharness-fixtures").run([
      "scenario", "completes", "--instruments", "none", "--output", directory.path,
    ])
    precondition(run.status == 0, run.standardError)
    return directory.appendingPathComponent("completes/starter/report.json").path
  }()

  @Test(
    "a FIFO, device, folder or socket given as a file is refused without blocking, naming it and what is accepted",
    arguments: FileInput.allCases, SpecialFile.allCases)
  func specialFiles(input: FileInput, special: SpecialFile) throws {
    // A folder is what --thresholds and a --baseline of several scenarios take.
    guard special != .folder || ![.baselineFile, .thresholdsFolder, .recordBaseline].contains(input) else { return }
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let (path, arguments) = input.arguments(in: directory, goodReport: Self.goodReport)
    try FileManager.default.createDirectory(
      atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
    try special.make(at: path)
    let binary = try BuiltBinary(arguments[0] == "scenario" ? "perfharness-fixtures" : "perfharness")
    let result = try #require(try binary.start(arguments).wait(atMost: 30), "\(arguments) hung on \(special.kind)")
    #expect(result.status == input.status, "\(arguments) \(result.standardError)")
    #expect(result.standardError.contains(path), "\(result.standardError)")
    #expect(result.standardError.contains("is \(special.kind)"), "\(result.standardError)")
    #expect(result.standardError.contains("accepted: a "), "\(result.standardError)")
  }

  @Test("a scenario's flood of output keeps its tail in the crash report and counts what came before")
  func floodedOutput() throws {
    let directory = try temporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    let running = try fixtures.start(
      ["scenario", "floods-then-aborts", "--instruments", "none", "--output", directory.path],
      environment: ["FIXTURE_FLOOD_MIB": "64"])
    // The harness's peak resident set, as late as it can be read: it only grows.
    var peakKiB = 0
    while running.process.isRunning {
      let status = (try? String(contentsOfFile: "/proc/\(running.pid)/status", encoding: .utf8)) ?? ""
      if let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
        let kib = Int(line.split(separator: " ").dropFirst().first { !$0.isEmpty } ?? "")
      {
        peakKiB = kib
      }
      usleep(10_000)
    }
    let result = try running.wait()
    #expect(result.status == 3)
    // 64 MiB went through it; kept whole, it would have peaked above that.
    #expect(peakKiB > 0 && peakKiB < 48 << 10, "peak \(peakKiB) KiB")
    let report = try JSONDecoder().decode(
      Report.self,
      from: Data(contentsOf: directory.appendingPathComponent("floods-then-aborts/starter/report.json")))
    let tail = report.crash?.standardErrorTail ?? []
    let first = try #require(tail.first)
    let count = try #require(Int(first.dropFirst().prefix { $0.isNumber }))
    #expect(first.hasSuffix(" earlier bytes of output not kept]"), "\(first)")
    // 64 MiB came before the backtrace; at most the collector's 256 KiB tail was kept.
    #expect(count >= 64 << 20 - StandardErrorCollector.tailBytes, "\(first)")
    #expect(tail.count <= 41)
    // All of it was passed on to the harness's stderr.
    #expect(result.standardError.utf8.count >= 64 << 20)
    #expect(result.standardError.contains("the last line"))
  }
}
