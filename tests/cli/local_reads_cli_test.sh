#!/usr/bin/env bash
# Local reads give the same samples through every path (docs/reads.md, "Local devices"), as a
# user runs it: `stoker convert` a folder of files into shards, then `stoker run SPEC --digest`
# over two epochs (shuffled: batches span every shard) with the shards in the page cache (slices
# of mappings, no copy), with STOKER_LOCAL_MMAP=off (copies), cold (pages dropped: the engine),
# half resident (every other MiB in the page cache), and with STOKER_DIRECT_IO=on (O_DIRECT);
# every digest must equal the first, and the keys delivered must be the files converted.
# Usage: local_reads_cli_test.sh STOKER
set -euo pipefail
stoker=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 240 files of 20-120 KB of random bytes in 3 class folders.
for i in $(seq 0 239); do
  mkdir -p "$work/tree/class$((i % 3))"
  head -c $((20000 + (i * 7919) % 100000)) /dev/urandom >"$work/tree/class$((i % 3))/f$i.bin"
done
"$stoker" convert "$work/tree" "$work/ds" --shard-size 4M >/dev/null 2>&1
shards=("$work"/ds/*.stk)
[[ ${#shards[@]} -ge 3 ]] || fail "expected several shards, got ${#shards[@]}"

cat >"$work/spec.json" <<JSON
{"source": {"dataset": "$work/ds/"}, "ops": [{"op": "shuffle", "seed": 3}]}
JSON

warm() { cat "${shards[@]}" >/dev/null; }
# GNU dd with iflag=nocache and count=0 drops a whole file's pages from the page cache.
drop() { for s in "${shards[@]}"; do dd if="$s" iflag=nocache count=0 status=none; done; }
half() {  # every other MiB of each shard back in the page cache
  drop
  for s in "${shards[@]}"; do
    mib=$(( ($(stat -c %s "$s") + 1048575) / 1048576 ))
    for ((m = 0; m < mib; m += 2)); do dd if="$s" of=/dev/null bs=1M skip=$m count=1 status=none; done
  done
}
run() { "$stoker" run "$work/spec.json" --epochs 2 --digest 2>"$work/report"; }

warm
reference=$(run)
[[ $reference =~ ^sha256\ [0-9a-f]{64}$ ]] || fail "no digest: $reference"
"$stoker" run "$work/spec.json" --print-keys 2>/dev/null | sort >"$work/keys"
(cd "$work/tree" && find . -name '*.bin' | sed -e 's|^\./||' -e 's|\.bin$||' | sort) >"$work/files"
cmp -s "$work/keys" "$work/files" || fail "the keys delivered are not the files converted"

warm
[[ $(STOKER_LOCAL_MMAP=off run) == "$reference" ]] || fail "copied reads (STOKER_LOCAL_MMAP=off) differ"
drop
[[ $(run) == "$reference" ]] || fail "cold reads differ"
half
[[ $(run) == "$reference" ]] || fail "half-resident reads differ"
drop
[[ $(STOKER_DIRECT_IO=on run) == "$reference" ]] || fail "O_DIRECT reads differ"
echo "PASS: one digest warm, copied, cold, half resident and O_DIRECT"
