#!/bin/bash
# Every global symbol the C targets define must be namespaced: the public API
# (CPerf<Target>_...), a hidden internal one (cperf_<target>_..., see each target's
# *_namespace.h), one of the functions the recorder interposes, or perfharness_mark, which
# a recorded program calls. Statically linked into a
# user's executable, an unprefixed global ("walk", "g_state") would clash with the user's
# own C code.
set -euo pipefail
build=${1:-.build/debug}
hooks='^(malloc|free|calloc|realloc|reallocarray|memalign|posix_memalign|aligned_alloc|valloc|pvalloc|malloc_usable_size|pthread_create|_exit)$'
# The one function a program calls itself (CPerfPreload.h).
hooks_api='^perfharness_mark$'
bad=0
for target in CPerfAlloc CPerfSampler CPerfHeapScan CPerfSupport CPerfSymbols CPerfCrash CPerfPreload; do
  # The objects of the target's current sources (a build folder keeps those of removed ones).
  objects=""
  for source in Sources/$target/*.c; do
    object="$build/$target.build/$(basename "$source").o"
    [ -f "$object" ] || { echo "check-c-symbols: $object is not built (build first)" >&2; exit 1; }
    objects="$objects $object"
  done
  internal="cperf_$(echo "${target#CPerf}" | tr '[:upper:]' '[:lower:]')_"
  while read -r symbol; do
    [[ $symbol == "${target}_"* || $symbol == "$internal"* ]] && continue
    [[ $symbol =~ $hooks || $symbol =~ $hooks_api ]] && continue
    echo "check-c-symbols: $target defines the global '$symbol': prefix it ${target}_ (public) or $internal (its namespace header)" >&2
    bad=1
  done < <(nm -g --defined-only $objects | awk 'NF == 3 {print $3}' | sort -u)
done
exit $bad
