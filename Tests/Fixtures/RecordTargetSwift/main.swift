// An ordinary Swift program that knows nothing of perfharness (it does not link it), for
// `perfharness record`'s tests: it leaks a retain cycle, grows a cache for a while, and
// exits with the status it is asked for.
//   record-target-swift [--seconds S] [--exit-status N] [--crash] [--leak-shape NAME N]
//                       [--raw-buffers N SIZE] [--ignore-term] [--say TEXT] [--async-chain MS]
// --crash: a failed force-unwrap once the cache is filled (the Swift runtime traps).
// --leak-shape: also leaks N instances of a shape of the leaks corpus (LeakShapes.byScenario;
// the corpus is plain Swift, no perfharness in it).
// --raw-buffers: also loses N raw buffers of SIZE bytes (RawBuffers.lose).
// --ignore-term: SIGTERM is ignored, as a server with a drain of its own may.
// --say: prints TEXT on stdout at the start.
// --async-chain: runs AsyncChain (outer -> middle -> inner, burning CPU for about MS ms in
// a detached task and as much in a task group) instead of the cache, the main thread waiting.
import AsyncChainCases
import Foundation
import LeakCorpusCases

final class Ledger {
  var auditor: Auditor?
  let entries = [1, 2, 3]
}

final class Auditor {
  let ledger: Ledger
  init(ledger: Ledger) { self.ledger = ledger }
}

final class Thumbnail {
  let pixels: [UInt8]
  init(size: Int) { pixels = [UInt8](repeating: 7, count: size) }
}

var seconds = 1.0
var exitStatus: Int32 = 0
var crashes = false
var leakShape: (make: @Sendable (Int) -> Void, count: Int)?
var rawBuffers: (count: Int, size: Int)?
var asyncChainMilliseconds: Int?
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
  switch argument {
  case "--seconds": seconds = Double(arguments.popFirst() ?? "") ?? seconds
  case "--exit-status": exitStatus = Int32(arguments.popFirst() ?? "") ?? 0
  case "--crash": crashes = true
  case "--leak-shape":
    guard let make = LeakShapes.byScenario[arguments.popFirst() ?? ""], let count = Int(arguments.popFirst() ?? "")
    else {
      FileHandle.standardError.write(Data("--leak-shape needs a shape of LeakShapes.byScenario and a count\n".utf8))
      exit(64)
    }
    leakShape = (make, count)
  case "--raw-buffers":
    guard let count = Int(arguments.popFirst() ?? ""), let size = Int(arguments.popFirst() ?? ""), size > 0 else {
      FileHandle.standardError.write(Data("--raw-buffers needs a count and a size in bytes\n".utf8))
      exit(64)
    }
    rawBuffers = (count, size)
  case "--ignore-term": signal(SIGTERM, SIG_IGN)
  case "--say": print(arguments.popFirst() ?? "")
  case "--async-chain": asyncChainMilliseconds = Int(arguments.popFirst() ?? "") ?? 300
  default:
    FileHandle.standardError.write(Data("unknown argument \(argument)\n".utf8))
    exit(64)
  }
}

// Published through a global, then dropped: an optimizer may remove an allocation nobody
// can observe, and release builds did.
var published: Ledger?

@MainActor @inline(never) func makeCycle() {
  let ledger = Ledger()
  ledger.auditor = Auditor(ledger: ledger)
  published = ledger
}

// For the tests that signal it: its pid, once its main code runs.
FileHandle.standardError.write(Data("record-target-swift ready, pid \(getpid())\n".utf8))

if let asyncChainMilliseconds {
  // Waited for on the main thread: the program ends there, as a server's main does.
  let finished = DispatchSemaphore(value: 0)
  Task.detached {
    print("async chain \(await AsyncChain.run(milliseconds: asyncChainMilliseconds) & 0xff)")
    finished.signal()
  }
  finished.wait()
  exit(exitStatus)
}

// The cache only grows: every entry is kept until the program ends.
var cache: [Int: Thumbnail] = [:]
makeCycle()
published = nil
if let leakShape { for step in 0..<leakShape.count { leakShape.make(step) } }
if let rawBuffers { RawBuffers.lose(count: rawBuffers.count, size: rawBuffers.size) }
let start = Date()
var key = 0
while Date().timeIntervalSince(start) < seconds {
  for _ in 0..<20 {
    cache[key] = Thumbnail(size: 4096)
    key += 1
  }
  usleep(20_000)
}
print("cached \(cache.count) thumbnails")
if crashes {
  let missing: Thumbnail? = cache[-1]
  print(missing!.pixels.count)
}
exit(exitStatus)
