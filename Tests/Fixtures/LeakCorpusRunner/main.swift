// `perfharness-leak-corpus-runner` (`make leak-corpus`): runs every shape of the leaks
// corpus many times, each in its own `perfharness-leak-corpus scenario` process (the
// default child mode, blocks tracked from the start), and prints found/expected per shape,
// build and instrument set. A verdict must hold in every run: one missed instance or one
// false leak in any run fails the whole run (exit 1).
//
//   perfharness-leak-corpus-runner [--runs N] [--configurations release,debug]
//       [--instruments leaks\;time,allocations,leaks] [--shapes a,b]
import Foundation
import LeakCorpusCases
import PerfHarness

struct Options {
  var runs = 20
  var configurations = ["release", "debug"]
  var instrumentSets = ["allocations,leaks", "time,allocations,leaks"]
  var shapes = LeakShapes.expectations.map(\.scenario)
  /// Instance counts, taken in turn run after run.
  var instanceCounts = [1, 7, 10, 25, 50]

  static func parse(_ arguments: [String]) -> Options {
    var options = Options()
    var rest = arguments[...]
    func value(_ flag: String) -> String {
      guard let value = rest.popFirst() else { fail("\(flag) needs a value") }
      return value
    }
    while let flag = rest.popFirst() {
      switch flag {
      case "--runs":
        let text = value(flag)
        guard let runs = Int(text), runs > 0 else { fail("--runs '\(text)' is not a positive number") }
        options.runs = runs
      case "--configurations": options.configurations = value(flag).split(separator: ",").map(String.init)
      case "--instruments": options.instrumentSets = value(flag).split(separator: ";").map(String.init)
      case "--shapes":
        options.shapes = value(flag).split(separator: ",").map(String.init)
        let known = Set(LeakShapes.expectations.map(\.scenario))
        for shape in options.shapes where !known.contains(shape) {
          fail("--shapes: unknown shape '\(shape)'; accepted: \(known.sorted().joined(separator: ", "))")
        }
      default:
        fail(
          "unknown argument '\(flag)'; accepted: --runs N, --configurations release,debug, --instruments 'SET;SET', --shapes A,B"
        )
      }
    }
    return options
  }
}

func fail(_ message: String) -> Never {
  FileHandle.standardError.write(Data("perfharness-leak-corpus-runner: \(message)\n".utf8))
  exit(64)
}

/// `.build/<configuration>/perfharness-leak-corpus`, beside this runner's own build folder.
func corpusBinary(_ configuration: String) -> URL {
  let runner = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
  let build = runner.deletingLastPathComponent().deletingLastPathComponent()
  let binary = build.appendingPathComponent("\(configuration)/perfharness-leak-corpus")
  guard FileManager.default.isExecutableFile(atPath: binary.path) else {
    fail("no \(binary.path): build it with swift build -c \(configuration) --product perfharness-leak-corpus")
  }
  return binary
}

/// What one run found, against what it should have.
struct Outcome {
  var instancesFound = 0
  var falseLeaks: [String] = []
  var problem: String?

  var isExact: Bool { problem == nil && falseLeaks.isEmpty }
}

func run(_ binary: URL, shape: LeakShapes.Expectation, instances: Int, instruments: String, output: URL) -> Outcome {
  let process = Process()
  process.executableURL = binary
  process.arguments = [
    "scenario", shape.scenario, "--iterations", "\(instances)", "--instruments", instruments, "--format", "json",
    "--output", output.path,
  ]
  let stdout = Pipe()
  process.standardOutput = stdout
  process.standardError = FileHandle.nullDevice
  do { try process.run() } catch { return Outcome(problem: "cannot start \(binary.path): \(error)") }
  let data = stdout.fileHandleForReading.readDataToEndOfFile()
  process.waitUntilExit()
  guard let report = try? JSONDecoder().decode(Report.self, from: data), let leaks = report.leaks else {
    return Outcome(problem: "exit \(process.terminationStatus), no report with a leaks section")
  }
  var outcome = Outcome()
  let members = shape.members.sorted()
  let otherRings = shape.otherRings.map { $0.sorted() }
  var otherRingsFound = Array(repeating: 0, count: otherRings.count)
  for cycle in leaks.cycles {
    let types = cycle.nodes.map { LeakShapes.shortTypeName($0.type) }.sorted()
    if types == members {
      outcome.instancesFound += cycle.instances
    } else if let other = otherRings.firstIndex(of: types) {
      otherRingsFound[other] += cycle.instances
    } else {
      outcome.falseLeaks.append("cycle \(types.joined(separator: "+")) x\(cycle.instances)")
    }
  }
  for (ring, found) in zip(otherRings, otherRingsFound) where found != instances {
    outcome.falseLeaks.append("ring \(ring.joined(separator: "+")) x\(found), expected x\(instances)")
  }
  for leak in leaks.rootLeaks { outcome.falseLeaks.append("root leak \(leak.type) x\(leak.count)") }
  var indirect: [String: Int] = [:]
  for leak in leaks.indirectLeaks { indirect[LeakShapes.shortTypeName(leak.type), default: 0] += leak.count }
  var expectedIndirect: [String: Int] = [:]
  for type in shape.indirect { expectedIndirect[type, default: 0] += outcome.instancesFound }
  if indirect != expectedIndirect { outcome.falseLeaks.append("indirect \(indirect), expected \(expectedIndirect)") }
  if outcome.instancesFound != instances {
    outcome.problem = "found \(outcome.instancesFound) of \(instances)"
  } else if leaks.leakedCount != instances * shape.blocksPerInstance {
    outcome.problem = "\(leaks.leakedCount) leaked blocks, expected \(instances * shape.blocksPerInstance)"
  }
  return outcome
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
let output = FileManager.default.temporaryDirectory.appendingPathComponent(
  "perfharness-leak-corpus-runner-\(getpid())")

print("shape                                   build    instruments              runs  exact  instances found/expected")
var allExact = true
for configuration in options.configurations {
  let binary = corpusBinary(configuration)
  for instruments in options.instrumentSets {
    for name in options.shapes {
      let shape = LeakShapes.expectations.first { $0.scenario == name }!
      var exact = 0
      var found = 0
      var expected = 0
      var problems: [String] = []
      for index in 0..<options.runs {
        let instances = options.instanceCounts[index % options.instanceCounts.count]
        let outcome = run(binary, shape: shape, instances: instances, instruments: instruments, output: output)
        expected += instances
        found += outcome.instancesFound
        if outcome.isExact {
          exact += 1
        } else {
          problems.append(
            "run \(index + 1) (\(instances) instances): "
              + ([outcome.problem].compactMap { $0 } + outcome.falseLeaks).joined(separator: "; "))
        }
      }
      allExact = allExact && exact == options.runs
      func pad(_ text: String, _ width: Int) -> String { text.padding(toLength: width, withPad: " ", startingAt: 0) }
      print(
        pad(name, 40) + pad(configuration, 9) + pad(instruments, 25) + pad("\(options.runs)", 6)
          + pad("\(exact)", 7) + "\(found)/\(expected)")
      for problem in problems.prefix(5) { print("    \(problem)") }
    }
  }
}
try? FileManager.default.removeItem(at: output)
print(allExact ? "every run exact" : "NOT every run exact")
exit(allExact ? 0 : 1)
