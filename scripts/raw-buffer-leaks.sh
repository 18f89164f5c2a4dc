#!/bin/bash
# `make raw-buffer-leaks`: raw heap buffers a program loses, in every configuration, RUNS
# runs each; prints found/expected per configuration and exits 1 unless every run of every
# configuration reported exactly the lost blocks (11 a run) and nothing else.
#   scripts/raw-buffer-leaks.sh [RUNS] [BUILD] [JOBS]
#     RUNS: runs per configuration (30); BUILD: the build folder (.build/release);
#     JOBS: runs at a time (2).
# Configurations: record and scenario mode; the C fixture (Tests/Fixtures/RawBuffersC, built
# here with Debian's cc -O2 and cc -O2 -fomit-frame-pointer; shapes plain, rbp, rbx) and
# Swift's UnsafeMutableRawPointer.allocate (record-target-swift, perfharness-leak-corpus's
# raw-buffers scenario); sizes 2480-2504 B every 8, 2500 B and 4096 B; the default
# instruments (time, allocations, leaks) and allocations,leaks, each with and without
# --no-allocation-stacks. The environment may limit them: MODES (record-c, record-swift,
# scenario-c, scenario-swift), SIZES, and C_CASES (BUILD/SHAPE pairs, BUILD -O2 or
# -O2-fomit-frame-pointer).
set -uo pipefail
runs=${1:-30}
build=${2:-.build/release}
jobs=${3:-2}
modes=${MODES:-record-c record-swift scenario-c scenario-swift}
sizes=${SIZES:-2480 2488 2496 2500 2504 4096}
cases=${C_CASES:-$(for b in -O2 -O2-fomit-frame-pointer; do for shape in plain rbp rbx; do echo "$b/$shape"; done; done)}
for binary in perfharness record-target-swift perfharness-leak-corpus libPerfHarnessPreload.so; do
  [ -e "$build/$binary" ] || { echo "raw-buffer-leaks: $build/$binary is not built" >&2; exit 1; }
done
work=$(mktemp -d /tmp/perfharness-raw-buffers.XXXXXX)
trap 'rm -rf "$work"' EXIT
source=Tests/Fixtures/RawBuffersC/raw_buffers.c
for flags in "-O2" "-O2 -fomit-frame-pointer"; do
  name=$(echo "$flags" | tr -d ' ')
  cc $flags -o "$work/raw-buffers$name" "$source" || exit 1
  cc $flags -DRAW_BUFFERS_LIBRARY -fPIC -shared -o "$work/libraw-buffers$name.so" "$source" || exit 1
done

# One run: prints "CONFIGURATION FOUND LEAKED" (lost blocks found, leaked blocks in all).
one_run() { # CONFIGURATION MODE INSTRUMENTS NOSTACKS SIZE SHAPE BUILDFLAGS INDEX
  local config=$1 mode=$2 instruments=$3 nostacks=$4 size=$5 shape=$6 flags=$7 index=$8
  local out="$work/out-$index" extra=() env=()
  [ "$nostacks" = 1 ] && extra=(--no-allocation-stacks)
  case $mode in
    record-c)
      "$build/perfharness" record --instruments "$instruments" "${extra[@]}" --format json --output "$out" -- \
        "$work/raw-buffers$flags" "$shape" 11 "$size" 2000000 > "$out.json" 2> /dev/null ;;
    record-swift)
      "$build/perfharness" record --instruments "$instruments" "${extra[@]}" --format json --output "$out" -- \
        "$build/record-target-swift" --seconds 0.05 --raw-buffers 11 "$size" > "$out.json" 2> /dev/null ;;
    scenario-c)
      env=(RAW_BUFFERS_LIBRARY="$work/libraw-buffers$flags.so" RAW_BUFFERS_SHAPE="$shape" RAW_BUFFERS_SIZE="$size") ;&
    scenario-swift)
      [ "$mode" = scenario-swift ] && env=(RAW_BUFFERS_SIZE="$size")
      env "${env[@]}" "$build/perfharness-leak-corpus" scenario raw-buffers --instruments "$instruments" \
        "${extra[@]}" --format json --output "$out" > "$out.json" 2> /dev/null ;;
  esac
  python3 - "$out.json" "$config" "$size" << 'EOF'
import json, sys
try:
    leaks = json.loads(open(sys.argv[1]).readline())["leaks"]
    lost = [l for l in leaks["rootLeaks"] if l["type"].startswith("Malloc ")]
    count, size = sum(l["count"] for l in lost), int(sys.argv[3])
    # A found block is one of 11 exactly the size lost (a size class holds only those here).
    found = count if sum(l["bytes"] for l in lost) == count * size else 0
    # Swift's record program also leaks its own cycle (two objects).
    other = leaks["leakedCount"] - count
    print(sys.argv[2], found, other)
except Exception:
    print(sys.argv[2], 0, -1)
EOF
  rm -rf "$out" "$out.json"
}
export -f one_run
export work build

# The list of runs: one line of one_run's arguments each.
index=0
list() {
  local mode=$1 flags=$2 shape=$3
  for set in "time,allocations,leaks 0" "time,allocations,leaks 1" "allocations,leaks 0" "allocations,leaks 1"; do
    read -r instruments nostacks <<< "$set"
    for size in $sizes; do
      local config="$mode${flags:+/cc$flags}${shape:+/$shape}/$size/$instruments$([ "$nostacks" = 1 ] && echo +no-stacks)"
      for ((run = 0; run < runs; run++)); do
        index=$((index + 1))
        echo "$config $mode $instruments $nostacks $size ${shape:--} ${flags:--} $index"
      done
    done
  done
}
{
  for mode in $modes; do
    case $mode in
      record-c | scenario-c)
        for case in $cases; do list "$mode" "${case%/*}" "${case#*/}"; done ;;
      *) list "$mode" "" "" ;;
    esac
  done
} > "$work/runs"
echo "raw-buffer-leaks: $(wc -l < "$work/runs") runs, $jobs at a time, $build" >&2
xargs -P "$jobs" -L 1 bash -c 'one_run "$@"' _ < "$work/runs" > "$work/results"
# Swift's record program leaks its own cycle too (Ledger and Auditor).
sort "$work/results" | awk '
function flush() {
  if (config == "") return
  printf "%-62s %5d %6d %d/%d\n", config, n, exact, found, n * 11
  all += n; ok += exact
}
$1 != config { flush(); config = $1; n = 0; exact = 0; found = 0 }
{
  expectedOther = (config ~ /^record-swift/) ? 2 : 0
  n++; found += $2
  if ($2 == 11 && $3 == expectedOther) exact++
}
BEGIN { printf "%-62s %5s %6s %s\n", "configuration", "runs", "exact", "found/expected" }
END { flush(); printf "%d of %d runs exact\n", ok, all; exit ok == all ? 0 : 1 }'
