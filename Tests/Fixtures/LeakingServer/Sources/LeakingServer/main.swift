import Foundation
import Hummingbird

/// What one request to `/leak` makes and never frees: the tutorial's closure retain cycle,
/// a request-scoped object whose stored closure captures it.
final class RequestScope: @unchecked Sendable {
  let number: Int
  var onFinish: (() -> Void)?

  init(number: Int) { self.number = number }
}

/// Counts the requests, so each scope gets its own number.
final class Counter: @unchecked Sendable {
  private let lock = NSLock()
  private var value = 0

  func next() -> Int {
    lock.lock()
    defer { lock.unlock() }
    value += 1
    return value
  }
}

// `leaking-server --port N`: listens on 127.0.0.1:N (0 by default: any free port), prints
// "listening on 127.0.0.1:PORT" on stderr once it accepts connections, and stops on SIGTERM
// or SIGINT (Hummingbird's graceful shutdown).
func requestedPort() -> Int {
  var port = 0
  var arguments = CommandLine.arguments.dropFirst().makeIterator()
  while let argument = arguments.next() {
    if argument == "--port", let value = arguments.next().flatMap({ Int($0) }) {
      port = value
    } else {
      FileHandle.standardError.write(Data("usage: leaking-server [--port N]\n".utf8))
      exit(64)
    }
  }
  return port
}

let port = requestedPort()
let counter = Counter()
let router = Router()
router.get("leak") { _, _ -> String in
  let scope = RequestScope(number: counter.next())
  // The cycle: the scope holds the closure, the closure holds the scope.
  scope.onFinish = { _ = scope.number }
  return "leaked \(scope.number)\n"
}
router.get("health") { _, _ -> String in "ok\n" }

let app = Application(
  router: router,
  configuration: .init(address: .hostname("127.0.0.1", port: port)),
  onServerRunning: { channel in
    let bound = channel.localAddress?.port ?? port
    FileHandle.standardError.write(Data("listening on 127.0.0.1:\(bound)\n".utf8))
  }
)
try await app.runService()
