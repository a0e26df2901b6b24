#!/usr/bin/env bash
# The process-level service tests (CTest label `service`) RUNS times in a row under a fixed background
# load of LOAD busy processes (each spins one core at normal priority), stopping at the first failure.
# Prints each round's result and ends with "N passed, M failed" (rounds).
#   scripts/test-stress.sh BUILD [RUNS=5] [LOAD=2]
set -uo pipefail
build=${1:?usage: test-stress.sh BUILD [RUNS] [LOAD]}
runs=${2:-5}
load=${3:-2}
jobs=${JOBS:-2}

spinners=()
stop_load() {
  ((${#spinners[@]})) && kill "${spinners[@]}" 2>/dev/null
  wait 2>/dev/null
}
trap stop_load EXIT INT TERM
for ((i = 0; i < load; i++)); do
  bash -c 'while :; do :; done' &
  spinners+=($!)
done
echo "test-stress: $runs rounds of the 'service' tests (ctest -j $jobs) beside $load busy processes"

passed=0 failed=0
for ((round = 1; round <= runs; round++)); do
  start=$(date +%s)
  (cd "$build" && ctest -L service -j "$jobs" --timeout 900 --output-on-failure) \
    >"$build/stress-round-$round.log" 2>&1
  status=$?
  load_avg=$(cut -d' ' -f1-3 /proc/loadavg)
  summary=$(grep -E 'tests passed|tests failed' "$build/stress-round-$round.log" | tail -1)
  echo "round $round: exit $status in $(($(date +%s) - start)) s, load $load_avg: $summary"
  if ((status == 0)); then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    grep -E '\*\*\*|Failed|Timeout' "$build/stress-round-$round.log" | grep -v '^[0-9]*% tests' | head -20
    echo "test-stress: the whole log is $build/stress-round-$round.log"
    break
  fi
done
echo "$passed passed, $failed failed"
((failed == 0 && passed == runs))
