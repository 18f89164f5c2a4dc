import Foundation
import PerfHarness

/// The folder a run writes its report into, `DIR/<scenario>/<variant>/` or record's
/// `DIR/<name>/`, held by this run until its report is written: a concurrent run into it is
/// refused.
///
/// `DIR` is the user's and may be a link they made (Reports -> /big/disk); the folders
/// perfharness makes under it are opened without following links, so a link in their place
/// is refused rather than emptied and written through.
///
/// Before the run, only what perfharness put there is removed: the files the previous run
/// listed in its manifest and the `.perfharness-` temporaries (a child's result, a killed
/// write). A file someone else put in the folder stays, as Instruments and heaptrack never
/// delete a file beside their recordings.
final class ReportFolder {
  let url: URL
  /// Files are written and removed relative to it: the folder checked is the one used.
  private let descriptor: Int32
  /// What this run wrote, relative to the folder, each listed before it is written: a run
  /// killed mid-write leaves a manifest naming every file it made.
  private var written: [String] = []

  /// The manifest; its prefix marks it as the harness's own, like the temporaries.
  static let manifestName = ".perfharness-files"
  /// Names the harness alone makes (temporaries, its results, the manifest): removed before
  /// a run whatever they are.
  static let harnessPrefix = ".perfharness-"

  /// - Throws: `HarnessError` naming the folder when another run holds it, it is a link or
  ///   not a folder, or it cannot be created or emptied.
  convenience init(directory: String, scenario: String, variant: String) throws {
    for name in [scenario, variant] where !Scenario.isValidName(name) {
      throw HarnessError("'\(name)' is not a valid scenario or variant name (lowercase letters, digits and '-')")
    }
    try self.init(output: directory, folders: [scenario, variant])
  }

  /// `folders` are plain names, made under `output` one by one.
  init(output: String, folders: [String]) throws {
    let root = URL(fileURLWithPath: output)
    url = folders.reduce(root) { $0.appendingPathComponent($1) }
    let rootDescriptor = try Self.openOutput(root)
    defer { close(rootDescriptor) }
    let descriptor = try FolderAt.openCreating(folders, under: rootDescriptor, shownAs: root)
    do {
      try Self.lock(descriptor, shownAs: url)
      try Self.removePreviousRun(in: descriptor, shownAs: url)
    } catch {
      close(descriptor)
      throw error
    }
    self.descriptor = descriptor
  }

  deinit { close(descriptor) }

  /// Writes `path` (relative, its folders made as needed) after listing it in the manifest.
  func write(_ data: Data, to path: String) throws {
    var folders = path.split(separator: "/").map(String.init)
    let name = folders.removeLast()
    if !written.contains(path) {
      written.append(path)
      let manifest = Data(written.map { $0 + "\n" }.joined().utf8)
      try ReportWriter.writeAtomically(
        manifest, named: Self.manifestName, in: descriptor, shownAs: url.appendingPathComponent(Self.manifestName))
    }
    let folder = try FolderAt.openCreating(folders, under: descriptor, shownAs: url)
    defer { close(folder) }
    try ReportWriter.writeAtomically(data, named: name, in: folder, shownAs: url.appendingPathComponent(path))
  }

  /// `--output` itself, made when missing; a link there is the user's choice and followed.
  private static func openOutput(_ root: URL) throws -> Int32 {
    do {
      try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    } catch {
      throw HarnessError(
        "cannot create the report folder \(root.path): \(ReportWriter.describe(error)); pass a writable directory with --output"
      )
    }
    let descriptor = open(root.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard descriptor >= 0 else {
      throw HarnessError("cannot open the report folder \(root.path): \(String(cString: strerror(errno)))")
    }
    return descriptor
  }

  /// The folder itself is locked: a lock file would have to stay behind, or its removal
  /// would race with a run that had just opened it.
  private static func lock(_ descriptor: Int32, shownAs url: URL) throws {
    guard flock(descriptor, LOCK_EX | LOCK_NB) != 0 else { return }
    let reason =
      errno == EWOULDBLOCK ? "another perfharness run is writing its report there" : String(cString: strerror(errno))
    throw HarnessError(
      "cannot use the report folder \(url.path): \(reason); wait for that run to end or pass another --output")
  }

  /// The files the manifest lists (then the folders they were in, when left empty) and the
  /// temporaries, in the folder and in those folders.
  private static func removePreviousRun(in descriptor: Int32, shownAs url: URL) throws {
    let listed = manifest(in: descriptor)
    var folders = Set<[String]>()
    do {
      for path in listed {
        try FolderAt.removeFile(path, under: descriptor)
        for depth in 1..<path.count { folders.insert(Array(path.prefix(depth))) }
      }
      // Deepest first, so a folder emptied of its subfolder is removed too.
      for folder in folders.sorted(by: { $0.count > $1.count }) {
        try FolderAt.removeFolderIfEmptied(folder, under: descriptor, removingFirst: harnessPrefix)
      }
      try FolderAt.removeEntries(in: descriptor, prefixed: harnessPrefix)
    } catch let error as FolderAt.Failure {
      throw HarnessError("cannot empty the report folder \(url.path) for this run: \(error.path): \(error.reason)")
    }
  }

  /// The previous run's manifest: relative paths of plain names, anything else ignored (a
  /// hand-edited line never reaches outside the folder).
  private static func manifest(in descriptor: Int32) -> [[String]] {
    let file = openat(descriptor, manifestName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
    guard file >= 0 else { return [] }
    let handle = FileHandle(fileDescriptor: file, closeOnDealloc: true)
    let text = String(decoding: (try? handle.read(upToCount: 1 << 20)) ?? Data(), as: UTF8.self)
    return text.split(separator: "\n").map {
      $0.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
    }
    .filter { parts in parts.allSatisfy { !$0.isEmpty && $0 != "." && $0 != ".." } }
  }
}

/// Folder operations relative to an open folder that never follow a symbolic link: a link
/// is refused, or removed itself, never what it points to.
enum FolderAt {
  /// A removal that failed: the path relative to the folder and the reason.
  struct Failure: Error {
    var path: String
    var reason: String
  }

  /// Opens `folders` one by one under `base`, making those missing; a new descriptor.
  /// - Throws: `HarnessError` naming the first that is a link or not a folder.
  static func openCreating(_ folders: [String], under base: Int32, shownAs baseURL: URL) throws -> Int32 {
    var current = fcntl(base, F_DUPFD_CLOEXEC, 0)
    var shown = baseURL
    for name in folders {
      shown.appendPathComponent(name)
      let made = mkdirat(current, name, 0o777) == 0 || errno == EEXIST
      let next = made ? openat(current, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1
      let reason = errno
      guard next >= 0 else {
        defer { close(current) }
        throw refusal(name, in: current, shownAs: shown, errno: reason, made: made)
      }
      close(current)
      current = next
    }
    return current
  }

  private static func refusal(_ name: String, in folder: Int32, shownAs url: URL, errno reason: Int32, made: Bool)
    -> HarnessError
  {
    guard made else {
      return HarnessError(
        "cannot create the report folder \(url.path): \(String(cString: strerror(reason))); pass a writable directory with --output"
      )
    }
    var status = stat()
    if fstatat(folder, name, &status, AT_SYMLINK_NOFOLLOW) == 0 && status.st_mode & S_IFMT == S_IFLNK {
      return HarnessError(
        "cannot use the report folder \(url.path): it is a symbolic link (to \(target(of: name, in: folder))), and perfharness follows no link below --output, so it neither empties nor writes through it; remove the link or pass another --output"
      )
    }
    let what = reason == ENOTDIR ? "it is not a folder" : String(cString: strerror(reason))
    return HarnessError("cannot use the report folder \(url.path): \(what); move it away or pass another --output")
  }

  private static func target(of link: String, in folder: Int32) -> String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlinkat(folder, link, &buffer, buffer.count - 1)
    return count < 0 ? "?" : String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// Opens an existing folder under `base`; nil when missing, a link or not a folder.
  static func openExisting(_ folders: [String], under base: Int32) -> Int32? {
    var current = fcntl(base, F_DUPFD_CLOEXEC, 0)
    for name in folders {
      let next = openat(current, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
      close(current)
      guard next >= 0 else { return nil }
      current = next
    }
    return current
  }

  /// Unlinks `path`'s last name; nothing when a folder on the way is missing or a link, or
  /// the name is now a folder (not a file the harness wrote).
  static func removeFile(_ path: [String], under base: Int32) throws {
    guard let folder = openExisting(Array(path.dropLast()), under: base) else { return }
    defer { close(folder) }
    guard unlinkat(folder, path.last!, 0) == 0 || errno == ENOENT || errno == EISDIR else {
      throw Failure(path: path.joined(separator: "/"), reason: String(cString: strerror(errno)))
    }
  }

  /// Removes the temporaries in `path`, then the folder if nothing else is left in it.
  static func removeFolderIfEmptied(_ path: [String], under base: Int32, removingFirst prefix: String) throws {
    guard let parent = openExisting(Array(path.dropLast()), under: base) else { return }
    defer { close(parent) }
    guard let folder = openExisting([path.last!], under: parent) else { return }
    defer { close(folder) }
    try removeEntries(in: folder, prefixed: prefix)
    if unlinkat(parent, path.last!, AT_REMOVEDIR) != 0 && errno != ENOTEMPTY && errno != EEXIST && errno != ENOENT {
      throw Failure(path: path.joined(separator: "/"), reason: String(cString: strerror(errno)))
    }
  }

  /// Removes every entry whose name starts with `prefix`, a folder with all it holds.
  static func removeEntries(in folder: Int32, prefixed prefix: String) throws {
    for name in try entries(of: folder) where name.hasPrefix(prefix) {
      try removeTree(name, in: folder)
    }
  }

  /// A link or file is unlinked itself; a folder is emptied through its own descriptor.
  private static func removeTree(_ name: String, in folder: Int32) throws {
    if unlinkat(folder, name, 0) == 0 || errno == ENOENT { return }
    guard errno == EISDIR, let inner = openExisting([name], under: folder) else {
      throw Failure(path: name, reason: String(cString: strerror(errno)))
    }
    defer { close(inner) }
    for entry in try entries(of: inner) { try removeTree(entry, in: inner) }
    guard unlinkat(folder, name, AT_REMOVEDIR) == 0 || errno == ENOENT else {
      throw Failure(path: name, reason: String(cString: strerror(errno)))
    }
  }

  /// The names in `folder`, read through a description of its own so the caller's offset
  /// is untouched.
  private static func entries(of folder: Int32) throws -> [String] {
    let own = openat(folder, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard own >= 0, let stream = fdopendir(own) else {
      let reason = String(cString: strerror(errno))
      if own >= 0 { close(own) }
      throw Failure(path: ".", reason: reason)
    }
    defer { closedir(stream) }
    var names: [String] = []
    while let entry = readdir(stream) {
      let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
      if name != "." && name != ".." { names.append(name) }
    }
    return names
  }
}
