import Foundation
import PerfHarness

/// The scenario's process, started with posix_spawn and explicit file actions: its stdout
/// and stderr are one pipe (everything it prints reaches the harness, in order, whatever
/// the order descriptors are set up in), and descriptor 3 is a second pipe the child hands
/// its result over when it cannot write its result file. Foundation's Process closes every
/// descriptor above 2 in the child, so it could not give the child that second pipe.
struct ChildProcess {
  let pid: pid_t
  /// Read end of the child's stdout and stderr.
  let output: FileHandle
  /// Read end of descriptor 3 (see `ResultPipe`).
  let result: ResultPipe

  /// The descriptor the child finds the result pipe on.
  static let resultDescriptor: Int32 = 3

  /// Starts `executable` in a process group of its own (a Ctrl-C at the terminal reaches
  /// the harness only, which passes it on), with every signal at its default action and
  /// none blocked, as a freshly exec'd program expects.
  static func spawn(executable: String, arguments: [String], environment: [String: String]) throws -> ChildProcess {
    let output = try Pipe2()
    let result = try Pipe2()
    defer {
      close(output.write)
      close(result.write)
    }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    // dup2 clears close-on-exec on the copies; the originals close on exec.
    posix_spawn_file_actions_adddup2(&actions, output.write, 1)
    posix_spawn_file_actions_adddup2(&actions, output.write, 2)
    posix_spawn_file_actions_adddup2(&actions, result.write, resultDescriptor)

    let (pid, status) = spawnFresh(
      executable, arguments: arguments, environment: environment, actions: &actions, ownGroup: true)
    if status != 0 {
      close(output.read)
      close(result.read)
      throw HarnessError("cannot start the scenario process \(executable): \(String(cString: strerror(status)))")
    }
    return ChildProcess(
      pid: pid, output: FileHandle(fileDescriptor: output.read, closeOnDealloc: true),
      result: ResultPipe(result.read))
  }

  /// posix_spawn with every signal at its default action and none blocked, as a freshly
  /// exec'd program expects; with `ownGroup`, in a process group of its own.
  /// - Returns: the pid, and posix_spawn's error (0 when it started).
  static func spawnFresh(
    _ executable: String, arguments: [String], environment: [String: String],
    actions: UnsafePointer<posix_spawn_file_actions_t>?, ownGroup: Bool
  ) -> (pid: pid_t, status: Int32) {
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var defaults = sigset_t()
    sigfillset(&defaults)
    var unblocked = sigset_t()
    sigemptyset(&unblocked)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setsigmask(&attributes, &unblocked)
    var flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK
    if ownGroup {
      posix_spawnattr_setpgroup(&attributes, 0)
      flags |= POSIX_SPAWN_SETPGROUP
    }
    posix_spawnattr_setflags(&attributes, Int16(flags))
    let argv = ([executable] + arguments).map { strdup($0) }
    let envp = environment.map { strdup("\($0.key)=\($0.value)") }
    defer {
      for pointer in argv + envp { free(pointer) }
    }
    var pid: pid_t = 0
    let status = (argv + [nil]).withUnsafeBufferPointer { argvBuffer in
      (envp + [nil]).withUnsafeBufferPointer { envpBuffer in
        posix_spawn(&pid, executable, actions, &attributes, argvBuffer.baseAddress!, envpBuffer.baseAddress!)
      }
    }
    return (pid, status)
  }

  /// Both ends of a pipe, closed on exec.
  private struct Pipe2 {
    var read: Int32
    var write: Int32

    init() throws {
      var fds: [Int32] = [-1, -1]
      guard pipe(&fds) == 0 else {
        throw HarnessError("cannot make a pipe for the scenario process: \(String(cString: strerror(errno)))")
      }
      read = fds[0]
      write = fds[1]
      // The harness starts no other process meanwhile: nothing can inherit them first.
      _ = fcntl(read, F_SETFD, FD_CLOEXEC)
      _ = fcntl(write, F_SETFD, FD_CLOEXEC)
    }
  }
}

/// Reads what the child hands over on descriptor 3, on a thread of its own so the child
/// never blocks on a full pipe, up to the size a report may have.
final class ResultPipe: @unchecked Sendable {
  private let done = DispatchSemaphore(value: 0)
  private let lock = NSLock()
  private var data = Data()
  private var overflowed = false

  init(_ descriptor: Int32) {
    Thread {
      let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
      while case let chunk = handle.availableData, !chunk.isEmpty {
        self.lock.withLock {
          if self.data.count + chunk.count > BoundedFile.reportLimit {
            self.overflowed = true
          } else if !self.overflowed {
            self.data.append(chunk)
          }
        }
      }
      self.done.signal()
    }.start()
  }

  /// What the child wrote, once every writer closed the pipe or `seconds` passed (a
  /// process the scenario started may hold it open); nil when it wrote nothing or more
  /// than a report may hold.
  func finish(within seconds: Int) -> Data? {
    _ = done.wait(timeout: .now() + .seconds(seconds))
    return lock.withLock { overflowed || data.isEmpty ? nil : data }
  }
}
