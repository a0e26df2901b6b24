#!/usr/bin/env bash
# Runs every libFuzzer target for a short time over its seed corpus (a copy, so the checked-in
# corpus stays small). Fuzzers are found by the project's rule: a file src/**/NAME_fuzzer.cc is
# built as BUILD/fuzz/NAME_fuzzer with its seeds in tests/fuzz/corpus/NAME_fuzzer. A fuzzer source
# without a binary, or a corpus folder without a fuzzer, fails the run. Any crash fails the run and
# leaves the reproducer in the log.
set -euo pipefail
build=${1:-build-fuzz}
seconds=${FUZZ_SECONDS:-15}
src=$(cd "$(dirname "$0")/.." && pwd)
mapfile -t names < <(find "$src/src" -name '*_fuzzer.cc' -printf '%f\n' | sed 's/\.cc$//' | sort)
if ((${#names[@]} == 0)); then echo "run-fuzzers: no *_fuzzer.cc under $src/src" >&2; exit 1; fi
failed=0
for corpus in "$src"/tests/fuzz/corpus/*/; do
  name=$(basename "$corpus")
  if [[ ! " ${names[*]} " =~ " $name " ]]; then
    echo "run-fuzzers: tests/fuzz/corpus/$name has no src/**/$name.cc" >&2; failed=1
  fi
done
# One fuzzer's run over its own copy of the seeds; on a failure its folder (with the reproducer)
# and log are kept, and a line in $failures says so. FUZZ_JOBS of them (the cores) run at once,
# each for its full time.
failures=$(mktemp)
run_one() {
  local name=$1 work
  work=$(mktemp -d)
  [[ -d $src/tests/fuzz/corpus/$name ]] && cp -r "$src/tests/fuzz/corpus/$name/." "$work/"
  echo "run-fuzzers: $name for ${seconds}s"
  if ! "$build/fuzz/$name" -max_total_time="$seconds" -rss_limit_mb=2048 -artifact_prefix="$work/" \
      "$work" >"$work.log" 2>&1; then
    echo "run-fuzzers: $name FAILED (log $work.log)"; tail -40 "$work.log"; echo "$name" >>"$failures"
    return
  fi
  rm -rf "$work" "$work.log"
}
jobs_max=${FUZZ_JOBS:-$(nproc)}
for name in "${names[@]}"; do
  if [[ ! -x $build/fuzz/$name ]]; then
    echo "run-fuzzers: $name: no binary $build/fuzz/$name (declare it with stoker_fuzzer)" >&2; failed=1; continue
  fi
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  run_one "$name" &
done
wait
[[ -s $failures ]] && failed=1
rm -f "$failures"
exit $failed
