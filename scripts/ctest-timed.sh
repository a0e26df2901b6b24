#!/usr/bin/env bash
# Runs ctest in a build folder with the given arguments, keeps its output in BUILD/ctest.log, and
# prints the slowest tests (wall time, as ctest measured each) after it. Exits with ctest's status.
#   scripts/ctest-timed.sh BUILD [ctest arguments...]
#   scripts/ctest-timed.sh --slowest BUILD [N]   only print the slowest N (15) of the last run
set -uo pipefail

slowest() {
  local log=$1 n=${2:-15}
  [[ -f $log ]] || { echo "ctest-timed: no $log"; return 0; }
  # ctest's result lines: "  12/402 Test  #35: name ......   Passed   12.34 sec"
  echo "Slowest tests (wall seconds, from $log):"
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) [ .*]*([A-Za-z][^0-9]*[A-Za-z]) +([0-9.]+) sec$/\3 \1 \2/p' "$log" |
    sort -rn | head -n "$n" | awk '{ s = $3; for (i = 4; i <= NF; i++) s = s " " $i; printf "  %8.1f  %-44s %s\n", $1, $2, s }'
  sed -nE 's/^Total Test time \(real\) = +([0-9.]+) sec/  total ctest wall time: \1 s/p' "$log"
}

if [[ ${1:-} == --slowest ]]; then
  slowest "$2/ctest.log" "${3:-15}"
  exit 0
fi

build=$1
shift
cd "$build" || exit 2
ctest "$@" 2>&1 | tee ctest.log
status=${PIPESTATUS[0]}
echo
slowest ctest.log 15
exit "$status"
