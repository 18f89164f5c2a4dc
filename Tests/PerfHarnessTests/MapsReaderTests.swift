import CPerfSupport
import Foundation
import Testing

@Suite("The malloc-free /proc/self/maps reader")
struct MapsReaderTests {
  struct Line: Equatable {
    var start: UInt64, end: UInt64, perms: String, path: String
  }

  static func read() -> [Line] {
    var reader = CPerfSupport_MapsReader()
    guard CPerfSupport_mapsOpen(&reader) else { return [] }
    defer { CPerfSupport_mapsClose(&reader) }
    var mapping = CPerfSupport_Mapping()
    var lines: [Line] = []
    while CPerfSupport_mapsNext(&reader, &mapping) {
      let perms = (mapping.readable ? "r" : "-") + (mapping.writable ? "w" : "-") + (mapping.executable ? "x" : "-")
      lines.append(Line(start: mapping.start, end: mapping.end, perms: perms, path: String(cString: mapping.path)))
    }
    return lines
  }

  static func expected(_ text: String) -> [Line] {
    text.split(separator: "\n").map { line in
      let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
      let bounds = fields[0].split(separator: "-")
      return Line(
        start: UInt64(bounds[0], radix: 16)!, end: UInt64(bounds[1], radix: 16)!, perms: String(fields[1].prefix(3)),
        path: fields.count == 6 ? fields[5].trimmingCharacters(in: .whitespaces) : "")
    }
  }

  @Test("it reads every line as the kernel writes it, and cuts only a path longer than its buffer")
  func matchesTheKernelsText() throws {
    // A file mapped from a path near PATH_MAX: its line is longer than the reader's 4 KiB.
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("maps-\(UUID().uuidString)")
    var folder = root
    while folder.path.utf8.count < 3850 {
      folder = folder.appendingPathComponent(String(repeating: "d", count: 200))
    }
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: root) }
    // 4,070 bytes of path (PATH_MAX is 4,096): with the addresses before it, over 4,096.
    let file = folder.appendingPathComponent(String(repeating: "f", count: 4070 - folder.path.utf8.count - 1))
    let fd = open(file.path, O_RDWR | O_CREAT, 0o600)
    try #require(fd >= 0)
    #expect(ftruncate(fd, 4096) == 0)
    let mapped = mmap(nil, 4096, PROT_READ, MAP_PRIVATE, fd, 0)
    close(fd)
    #expect(mapped != MAP_FAILED)
    defer { munmap(mapped, 4096) }

    // Two reads, each compared with the text read right after it; the process's mappings
    // change meanwhile only by chance (another test's thread: the allocation recorder's
    // tables grow in place with mremap, a thread's stack comes or goes), so one attempt in
    // twenty must agree line for line (three were not enough beside the recording tests).
    var agreed = false
    var difference = ""
    for attempt in 0..<20 where !agreed {
      if attempt > 0 { usleep(20_000) }
      let read = Self.read()
      // Read to the end: a /proc file has no size, and a sized read stops short.
      let handle = try #require(FileHandle(forReadingAtPath: "/proc/self/maps"))
      let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
      handle.closeFile()
      let expected = Self.expected(text)
      guard read.count == expected.count else {
        difference = "\(read.count) lines read, \(expected.count) in the text"
        continue
      }
      let differing = zip(read, expected).first { got, want in
        !(got.start == want.start && got.end == want.end && got.perms == want.perms
          && (got.path == want.path || (want.path.hasPrefix(got.path) && got.path.utf8.count > 3000)))
      }
      agreed = differing == nil
      if let differing { difference = "read \(differing.0), the text says \(differing.1)" }
    }
    #expect(agreed, "\(difference.prefix(600))")
    let long = Self.read().first { $0.start == UInt64(UInt(bitPattern: mapped)) }
    #expect(long != nil)
    #expect(long.map { file.path.hasPrefix($0.path) && $0.path.utf8.count > 3000 } == true)
    // Cut: the line did not fit, and the lines after it still read whole (above).
    #expect(long.map { $0.path.utf8.count < file.path.utf8.count } == true)
  }
}
