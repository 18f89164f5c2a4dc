// `make bench`'s sampling floor (CBenchSampling.h says what it measures): `ROUNDS` rounds of
// the plain loop and the loop under a cpu-clock perf event without and with a signal per
// overflow, one line per run for the bench to pair. An executable of its own: bench-workload,
// which the peers run, stays Swift only (valgrind 3.19 cannot read clang's DWARF 5).
import CBenchSampling
import Glibc

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 1, let rounds = Int(arguments[0]), rounds > 0 else {
  let message =
    "error: unknown arguments '\(arguments.joined(separator: " "))'; accepted: ROUNDS (a positive integer)\n"
  _ = message.withCString { write(2, $0, strlen($0)) }
  exit(64)
}
let sources: [(String, CBenchSampling_Source)] = [
  ("none", CBenchSampling_None), ("event", CBenchSampling_EventOnly), ("signal", CBenchSampling_EventSignal),
]
for round in 0..<rounds {
  // Each round starts with a different source, so no source always runs first.
  for offset in 0..<sources.count {
    let (name, source) = sources[(round + offset) % sources.count]
    let run = CBenchSampling_run(source, 4000, 60_000)
    print(
      "sampling-floor: round=\(round) source=\(name) ms=\(run.milliseconds) samples=\(run.samples) error=\(run.error)")
  }
}
