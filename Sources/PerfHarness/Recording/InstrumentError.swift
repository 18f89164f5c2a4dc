import CPerfSupport

#if canImport(Glibc)
  import Glibc
#endif

/// An instrument that could not start or stop: what was wrong, and the failing call's errno.
struct InstrumentError: Error, CustomStringConvertible {
  enum Code: String, Sendable {
    case invalidConfiguration
    case alreadyRunning
    case systemCallFailed
    case invalidState
  }

  var code: Code
  var message: String
  /// errno of the failing call, when a call failed.
  var errnoValue: Int32?

  var description: String {
    if let errnoValue {
      return "\(code.rawValue): \(message) (errno \(errnoValue): \(String(cString: strerror(errnoValue))))"
    }
    return "\(code.rawValue): \(message)"
  }
}

typealias SamplingError = InstrumentError
typealias AllocationRecorderError = InstrumentError

extension InstrumentError {
  /// The error a C recorder reported (its status and CPerfSupport_Error), given which of its
  /// codes mean busy, a failed call and a call in the wrong state; `running` names what is
  /// already running when it is busy.
  init(
    status: Int32, error: CPerfSupport_Error, busy: UInt32, system: UInt32, state: UInt32, running: String
  ) {
    let call = error.call.map { String(cString: $0) } ?? "unknown"
    switch UInt32(bitPattern: status) {
    case busy:
      self.init(
        code: .alreadyRunning, message: "another \(running) is already running in this process; stop it first",
        errnoValue: nil)
    case system: self.init(code: .systemCallFailed, message: "\(call) failed", errnoValue: error.sysErrno)
    case state: self.init(code: .invalidState, message: call, errnoValue: nil)
    default: self.init(code: .invalidConfiguration, message: "invalid \(call)", errnoValue: nil)
    }
  }
}
