#!/bin/bash
# The C targets and fixtures compile without a warning under -Wall -Wextra: checked here
# rather than with flags in Package.swift, where unsafeFlags would keep other packages
# (Examples/CustomScenarios) from depending on this one.
set -euo pipefail
clang=${CLANG:-clang}
includes=()
for include in Sources/C*/include Tests/Fixtures/*/include; do includes+=(-I "$include"); done
bad=0
# The targets get _GNU_SOURCE from Package.swift; the fixtures define what they need.
for source in Sources/C*/*.c Tests/Fixtures/*/*.c; do
  defines=()
  [[ $source == Sources/* ]] && defines=(-D_GNU_SOURCE)
  "$clang" -fsyntax-only "${defines[@]}" -Wall -Wextra -Werror "${includes[@]}" -I "$(dirname "$source")" "$source" ||
    bad=1
done
exit $bad
