#!/usr/bin/env bash
# The fuzz campaign (`make fuzz-long`; not part of `make test`): every libFuzzer target runs until
# FUZZ_RUNS executions (10,000,000) or FUZZ_LONG_SECONDS (1800) have passed, whichever comes first,
# starting from its checked-in seeds. Afterwards what the run found is merged into
# tests/fuzz/corpus/NAME with libFuzzer's -merge=1: the named seeds stay, and only the new inputs
# that add coverage are added (so the corpus stays minimal). A crash, leak or timeout fails the campaign and keeps its reproducer in
# BUILD/fuzz-long/NAME/. The figures (executions, seconds, coverage, corpus size, crashes) go to
# bench/results/fuzz.md.
#
#   scripts/fuzz-long.sh [BUILD]        BUILD: the clang fuzz build (default build-fuzz)
#   FUZZ_ONLY="tar_fuzzer image_fuzzer" limits the campaign to those targets.
#   FUZZ_REPORT=FILE writes the figures there instead (for campaigns run side by side).
set -euo pipefail
build=${1:-build-fuzz}
runs=${FUZZ_RUNS:-10000000}
seconds=${FUZZ_LONG_SECONDS:-1800}
src=$(cd "$(dirname "$0")/.." && pwd)
out=$build/fuzz-long
report=${FUZZ_REPORT:-$src/bench/results/fuzz.md}
mkdir -p "$out"
mapfile -t names < <(find "$src/src" -name '*_fuzzer.cc' -printf '%f\n' | sed 's/\.cc$//' | sort)
if [[ -n ${FUZZ_ONLY:-} ]]; then read -r -a names <<<"$FUZZ_ONLY"; fi

rows=()
failed=0
for name in "${names[@]}"; do
  f=$build/fuzz/$name
  [[ -x $f ]] || { echo "fuzz-long: $name: no binary $f" >&2; failed=1; continue; }
  seeds=$src/tests/fuzz/corpus/$name
  work=$out/$name
  rm -rf "$work" && mkdir -p "$work/found"
  seed_dirs=()
  before=0
  if [[ -d $seeds ]]; then seed_dirs=("$seeds"); before=$(find "$seeds" -type f | wc -l); fi
  echo "fuzz-long: $name: up to $runs executions or ${seconds}s"
  start=$(date +%s)
  status=ok
  # -print_final_stats prints stat::number_of_executed_units; the seeds are read, not written.
  # The CPU time it got too: a campaign run at low priority beside builds gets less than its wall
  # time.
  TIMEFORMAT='%U %S'
  if ! { time "$f" -runs="$runs" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=25 \
      -print_final_stats=1 -artifact_prefix="$work/" "$work/found" "${seed_dirs[@]}" \
      >"$work/run.log" 2>&1; } 2>"$work/cpu"; then
    status="FAILED (see $work/run.log)"
    failed=1
    tail -30 "$work/run.log"
  fi
  elapsed=$(($(date +%s) - start))
  cpu=$(awk '{printf "%.0f", $1 + $2}' "$work/cpu" 2>/dev/null || echo "?")
  # -a: a target's log lines may quote input bytes; without it grep stops at the first one.
  execs=$(grep -ao 'stat::number_of_executed_units: [0-9]*' "$work/run.log" | tail -1 | awk '{print $2}')
  cov=$(grep -ao 'cov: [0-9]* ft: [0-9]*' "$work/run.log" | tail -1)
  # Keep what adds coverage to the seeds (not after a failure: fix it first).
  if [[ $status == ok ]]; then
    mkdir -p "$seeds"
    "$f" -merge=1 -rss_limit_mb=2048 "$seeds" "$work/found" >"$work/merge.log" 2>&1 ||
      { echo "fuzz-long: $name: merge failed (see $work/merge.log)" >&2; failed=1; }
  fi
  after=$(find "$seeds" -type f 2>/dev/null | wc -l)
  size=$(( $(du -sb "$seeds" 2>/dev/null | cut -f1 || echo 0) / 1024 ))
  rows+=("| $name | ${execs:-?} | $elapsed | $cpu | ${cov:-?} | $before → $after ($size KiB) | $status |")
  echo "fuzz-long: $name: ${execs:-?} executions in ${elapsed}s (${cpu} CPU-s), ${cov:-?}, corpus $before -> $after, $status"
done

{
  echo "# Fuzz campaign"
  echo
  echo "\`make fuzz-long\` (scripts/fuzz-long.sh), $(date -u '+%Y-%m-%d %H:%M UTC'), commit" \
       "$(git -C "$src" rev-parse --short HEAD): each target until $runs executions or ${seconds} s." \
       "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (2 cores, shared)."
  echo
  echo "| target | executions | seconds | CPU seconds | coverage (edges, features) | corpus (seeds → minimized) | result |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} >"$report"
echo "fuzz-long: results in $report"
exit $failed
