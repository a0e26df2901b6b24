#!/usr/bin/env bash
# End-to-end check of `stoker convert` and `stoker inspect --verify` (run by CTest as format_cli):
# a folder tree and a GNU-tar WebDataset convert, verify, and a flipped byte fails verification
# naming the shard and the record offset.
set -euo pipefail
stoker=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for c in birds cats; do
  mkdir -p "$work/tree/$c"
  for i in 1 2 3 4 5; do head -c $((3000 + i * 500)) /dev/urandom > "$work/tree/$c/img$i.jpg"; done
done
"$stoker" convert "$work/tree" "$work/ds" --shard-size 12K > "$work/convert.out"
grep -q "converted 10 samples" "$work/convert.out"
"$stoker" inspect "$work/ds" --verify > "$work/inspect.out"
grep -q "samples: 10" "$work/inspect.out"
grep -q "verify: OK, 10 records" "$work/inspect.out"
grep -q "cats/img1" <("$stoker" inspect "$work/ds" --keys 10)

(cd "$work/tree" && tar -cf "$work/wds.tar" birds cats)
"$stoker" convert "$work/wds.tar" "$work/ds2" > /dev/null
"$stoker" inspect "$work/ds2" --verify | grep -q "verify: OK, 10 records"
"$stoker" inspect "$work/wds.tar" | grep -q "samples: 10"

# Flip one byte inside the first record of the first shard: --verify must fail and say where.
printf '\xff' | dd of="$work/ds/shard-00000.stk" bs=1 seek=40 conv=notrunc status=none
if "$stoker" inspect "$work/ds" --verify > /dev/null 2> "$work/err"; then
  echo "inspect --verify passed on a corrupt shard" >&2; exit 1
fi
grep -q "shard-00000.stk: record at offset 16" "$work/err" || { cat "$work/err" >&2; exit 1; }
echo "format cli: OK"
