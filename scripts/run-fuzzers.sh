#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD/fuzz for a short time over its seed corpus (a copy, so the
# checked-in corpus stays small). Any crash fails the run and leaves the reproducer in the log.
set -euo pipefail
build=${1:-build-fuzz}
seconds=${FUZZ_SECONDS:-15}
src=$(cd "$(dirname "$0")/.." && pwd)
shopt -s nullglob
fuzzers=("$build"/fuzz/*)
if ((${#fuzzers[@]} == 0)); then echo "run-fuzzers: no fuzz targets in $build/fuzz" >&2; exit 1; fi
failed=0
for f in "${fuzzers[@]}"; do
  name=$(basename "$f")
  work=$(mktemp -d)
  [[ -d $src/tests/fuzz/corpus/$name ]] && cp -r "$src/tests/fuzz/corpus/$name/." "$work/"
  echo "run-fuzzers: $name for ${seconds}s"
  if ! "$f" -max_total_time="$seconds" -rss_limit_mb=2048 -artifact_prefix="$work/" "$work" >"$work.log" 2>&1; then
    echo "run-fuzzers: $name FAILED"; tail -40 "$work.log"; failed=1
  fi
  rm -rf "$work" "$work.log"
done
exit $failed
