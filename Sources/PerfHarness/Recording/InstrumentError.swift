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
