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
for name in "${names[@]}"; do
  f=$build/fuzz/$name
  if [[ ! -x $f ]]; then echo "run-fuzzers: $name: no binary $f (declare it with stoker_fuzzer)" >&2; failed=1; continue; fi
  work=$(mktemp -d)
  [[ -d $src/tests/fuzz/corpus/$name ]] && cp -r "$src/tests/fuzz/corpus/$name/." "$work/"
  echo "run-fuzzers: $name for ${seconds}s"
  if ! "$f" -max_total_time="$seconds" -rss_limit_mb=2048 -artifact_prefix="$work/" "$work" >"$work.log" 2>&1; then
    echo "run-fuzzers: $name FAILED"; tail -40 "$work.log"; failed=1
  fi
  rm -rf "$work" "$work.log"
done
exit $failed
