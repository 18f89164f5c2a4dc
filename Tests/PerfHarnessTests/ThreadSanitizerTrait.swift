import Foundation
import Testing

/// Whether this test process runs under ThreadSanitizer (`make test-tsan`): its runtime
/// defines `__tsan_init` in the executable.
enum ThreadSanitizer {
  static let isActive: Bool = {
    guard let process = dlopen(nil, RTLD_NOW) else { return false }
    return dlsym(process, "__tsan_init") != nil
  }()
}

extension Trait where Self == ConditionTrait {
  /// For tests that compare the sampler's stacks with libunwind's or a known CPU split: TSan
  /// defers signal handlers to its own safe points, so the stacks sampled are TSan's.
  static var samplesWhereTheSignalLands: Self {
    .disabled(if: ThreadSanitizer.isActive, "ThreadSanitizer defers signal handlers: the sampled stacks are its own")
  }
}
