import Foundation
import HeapScanCases
import Testing

/// The sampler interposes pthread_create to see each thread from its first instruction. Its
/// pool of start routines is a global, so the leak scan reads it as a root: nothing of a
/// thread's start may stay there once the thread runs.
@Suite("pthread_create's trampoline")
struct ThreadStartTests {
  @Test("a started thread's argument is not left in a global")
  func argumentIsCleared() throws {
    let argument = try #require(malloc(48))
    defer { free(argument) }
    let address = UInt(bitPattern: argument)
    var thread = pthread_t()
    #expect(pthread_create(&thread, nil, { $0 }, argument) == 0)
    #expect(pthread_join(thread, nil) == 0)
    #expect(HeapScanCases_globalWordsEqualTo(UInt64(address)) == 0)
  }
}
