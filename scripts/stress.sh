#!/bin/bash
# `make stress`: the attacks of issue #42's rounds on the built binaries, each printed as
# held or broken with what was seen, so that the next round starts from them. Not part of
# `make test`: some take tens of seconds, and they judge the product as an outside tester
# would (by exit codes, files and timings), not its internals.
#   scripts/stress.sh [BUILD]   BUILD: the build folder (default .build/debug)
set -uo pipefail
build=${1:-.build/debug}
perfharness="$build/perfharness"
swift_target="$build/record-target-swift"
c_target="$build/record-target-c"
for binary in "$perfharness" "$swift_target" "$c_target"; do
  [ -x "$binary" ] || { echo "stress: $binary is not built (swift build first)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/perfharness-stress.XXXXXX)
trap 'rm -rf "$work"' EXIT
held=0
broken=0

verdict() { # NAME OK DETAIL
  if [ "$2" = 1 ]; then
    held=$((held + 1))
    printf 'held    %-58s %s\n' "$1" "$3"
  else
    broken=$((broken + 1))
    printf 'BROKEN  %-58s %s\n' "$1" "$3"
  fi
}

# Runs the harness with a deadline; sets status and seconds.
timed() { # SECONDS ARGS...
  local limit=$1
  shift
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$work/out" 2> "$work/err"
  status=$?
  seconds=$((SECONDS - start))
}

attack_symlinked_folder() {
  mkdir -p "$work/precious/sub" "$work/out1"
  echo keep > "$work/precious/precious.txt"
  echo secret > "$work/precious/sub/id_rsa"
  ln -s "$work/precious" "$work/out1/true"
  timed 60 "$perfharness" record --instruments allocations --output "$work/out1" -- /bin/true
  local intact=0
  [ -f "$work/precious/precious.txt" ] && [ -f "$work/precious/sub/id_rsa" ] \
    && [ "$(ls -A "$work/precious" | wc -l)" = 2 ] && intact=1
  verdict "record into a symlinked report folder" $((intact && status == 1)) \
    "exit $status, target $([ $intact = 1 ] && echo untouched || echo CHANGED)"
}

attack_fifo_baseline() {
  mkfifo "$work/fifo"
  timed 20 "$perfharness" record --baseline "$work/fifo" --output "$work/out2" -- /bin/true
  verdict "a FIFO as --baseline" $((status == 64)) "exit $status in ${seconds} s"
}

attack_huge_limit() {
  timed 60 "$perfharness" record --check --max-leaked-bytes 9223372036854775807 --output "$work/out3" -- /bin/true
  verdict "--max-leaked-bytes Int.max" $((status == 64)) "exit $status"
}

attack_ignored_sigterm() {
  "$perfharness" record --grace 1 --instruments allocations --output "$work/out4" -- \
    python3 -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)' \
    > /dev/null 2>&1 &
  local harness=$! start=$SECONDS
  sleep 2
  kill -TERM $harness
  wait $harness
  status=$?
  verdict "a program that ignores SIGTERM, harness SIGTERMed" $((status == 143 && SECONDS - start < 15)) \
    "exit $status after $((SECONDS - start)) s"
}

attack_killed_harness() {
  "$perfharness" record --instruments allocations --output "$work/out5" -- "$swift_target" --seconds 60 \
    > /dev/null 2> "$work/err5" &
  local harness=$!
  local pid=""
  for _ in $(seq 100); do
    pid=$(sed -n 's/.*ready, pid \([0-9]*\).*/\1/p' "$work/err5")
    [ -n "$pid" ] && break
    sleep 0.1
  done
  kill -KILL $harness
  wait $harness 2> /dev/null
  sleep 2
  local alive=0
  [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null && alive=1 && kill -KILL "$pid"
  verdict "SIGKILL to the harness during record" $((alive == 0 && ${#pid} > 0)) \
    "program $([ $alive = 1 ] && echo 'ran on' || echo 'ended with it')"
}

attack_json_stdout() {
  timed 60 "$perfharness" record --format json --instruments allocations --output "$work/out6" -- /bin/echo hello
  local valid=0
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$work/out" 2> /dev/null && valid=1
  verdict "record --format json -- /bin/echo hello | jq" $((valid && status == 0)) \
    "stdout $([ $valid = 1 ] && echo 'is one JSON report' || echo 'is not JSON')"
}

attack_escape_sequences() {
  timed 60 "$perfharness" record --instruments allocations --output "$work/out7" -- /bin/echo $'\e[2J\e]0;owned\a'
  local raw=0
  grep -q $'\e' "$work/out" && raw=1
  # The program's own echo is its output, not the harness's: only the summary's lines count.
  grep -v '^.\[2J' "$work/out" | grep -q $'\e' && raw=2
  verdict "escape sequences in the program's arguments" $((raw != 2)) \
    "$([ $raw = 2 ] && echo 'raw in the summary' || echo 'escaped in the summary')"
}

attack_false_leaks() {
  timed 120 "$perfharness" record --instruments allocations,leaks --output "$work/out8" \
    -- "$c_target" --long-labels --dlopen
  # The C program leaks 7 blocks of its own: exactly those must be the report's.
  local leaked
  leaked=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["leaks"]["leakedCount"])' \
    "$work/out8/record-target-c/report.json" 2> /dev/null || echo none)
  verdict "long mark labels and dlopen of loaded libraries: no false leak" $([ "$leaked" = 7 ] && echo 1 || echo 0) \
    "$leaked leaked blocks (7 are the program's)"
}

attack_generic_capture() {
  timed 120 "$perfharness" record --output "$work/out9" -- "$swift_target" --seconds 0.1 \
    --leak-shape shape-generic-handler 20
  verdict "a closure capturing (Request, Self.Context) async throws -> Output" $((status == 0)) "exit $status"
}

attack_jemalloc_environment() {
  local jemalloc
  jemalloc=$(ldconfig -p | sed -n 's/.*libjemalloc.so.2 .*=> //p' | head -1)
  if [ -z "$jemalloc" ]; then
    verdict "LD_PRELOAD=libjemalloc.so.2 perfharness list" 1 "skipped: libjemalloc2 not installed"
    return
  fi
  LD_PRELOAD=$jemalloc timeout 60 "$perfharness" list > /dev/null 2>&1
  status=$?
  verdict "LD_PRELOAD=libjemalloc.so.2 perfharness list" $((status == 0)) "exit $status"
}

attack_closed_descriptors() {
  timed 30 "$perfharness" record --output "$work/out10" -- python3 -c 'import os
os.closerange(3, 1024)
r, w = os.pipe()
os.write(w, b"x" * 37)
assert len(os.read(r, 64)) == 37'
  verdict "a program that closes fds 3-1023, then uses a pipe" $((status == 0)) "exit $status"
}

echo "perfharness stress: $perfharness"
attack_symlinked_folder
attack_fifo_baseline
attack_huge_limit
attack_ignored_sigterm
attack_killed_harness
attack_json_stdout
attack_escape_sequences
attack_false_leaks
attack_generic_capture
attack_jemalloc_environment
attack_closed_descriptors
echo "$held held, $broken broken"
[ "$broken" = 0 ]
