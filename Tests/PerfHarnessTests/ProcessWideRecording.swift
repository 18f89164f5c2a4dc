import Testing

/// The instruments record the whole process, one session at a time: every suite that
/// records is nested here so that they run one after another, never side by side.
@Suite(.serialized)
enum ProcessWideRecording {}
