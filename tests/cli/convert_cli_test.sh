#!/usr/bin/env bash
# End-to-end check of `stoker convert` and `stoker inspect --verify` (run by CTest as format_cli):
# a folder tree and a GNU-tar WebDataset convert, verify, and a flipped byte fails verification
# naming the shard and the record offset.
set -euo pipefail  # (grep reads its whole input below: with -q a writer could die of SIGPIPE)
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
"$stoker" inspect "$work/ds2" --verify | grep "verify: OK, 10 records" > /dev/null
"$stoker" inspect "$work/wds.tar" | grep "samples: 10" > /dev/null
# The same tar named as webdataset's ShardWriter names shards with a custom pattern, no extension:
# told by its content, in a folder and alone (docs/format.md, "Telling the input formats apart").
mkdir -p "$work/noext"
cp "$work/wds.tar" "$work/noext/shard-000000"
"$stoker" convert "$work/noext" "$work/ds3" > "$work/convert.out"
grep -q "converted 10 samples .* from 1 WebDataset tar file(s)" "$work/convert.out" ||
  { cat "$work/convert.out" >&2; exit 1; }
"$stoker" inspect "$work/noext/shard-000000" | grep -q "format: WebDataset tar"
# A tar with a damaged header checksum: an error naming the file and the offset.
cp "$work/wds.tar" "$work/noext/shard-000001"
printf 'X' | dd of="$work/noext/shard-000001" bs=1 seek=0 conv=notrunc status=none
if "$stoker" convert "$work/noext" "$work/ds4" > /dev/null 2> "$work/err"; then
  echo "convert said OK on a folder holding a tar with a bad header checksum" >&2; exit 1
fi
grep -q "noext/shard-000001: named like the other WebDataset tar files .*checksum at offset 148" \
  "$work/err" || { cat "$work/err" >&2; exit 1; }
if "$stoker" convert --input-format tar "$work/noext/shard-000001" "$work/ds4" > /dev/null 2> "$work/err"; then
  echo "convert said OK on a tar with a bad header checksum" >&2; exit 1
fi
grep -q "shard-000001: asked for as a WebDataset tar file, but its content is not one" "$work/err" ||
  { cat "$work/err" >&2; exit 1; }

# A folder tree as cameras and file managers leave it: extensions in any case (photo.JPEG,
# x.Jpeg, y.JPG all become field jpg, as ImageFolder accepts them), hidden files, a broken link.
mkdir -p "$work/messy/dogs" "$work/messy/owls/.thumbs"
head -c 3000 /dev/urandom > "$work/messy/dogs/photo.JPEG"
head -c 3000 /dev/urandom > "$work/messy/dogs/x.Jpeg"
head -c 3000 /dev/urandom > "$work/messy/owls/y.JPG"
echo junk > "$work/messy/dogs/.DS_Store"
echo junk > "$work/messy/owls/.thumbs/y.png"
ln -s ../nowhere.jpg "$work/messy/owls/z.jpg"
"$stoker" convert "$work/messy" "$work/messy-ds" > "$work/convert.out"
grep -q "converted 3 samples" "$work/convert.out" || { cat "$work/convert.out" >&2; exit 1; }
grep -q "^fields: cls, jpg$" "$work/convert.out" || { cat "$work/convert.out" >&2; exit 1; }
grep -q "left out 2 hidden file(s) (names starting with '.'): dogs/.DS_Store, owls/.thumbs/y.png" \
  "$work/convert.out" || { cat "$work/convert.out" >&2; exit 1; }
grep -q "left out 1 broken symbolic link(s) (target missing): owls/z.jpg -> ../nowhere.jpg" \
  "$work/convert.out" || { cat "$work/convert.out" >&2; exit 1; }
"$stoker" inspect "$work/messy-ds" --keys 3 | grep "dogs/photo" > /dev/null || exit 1

# WebDataset tars made by GNU tar that break the "one sample = adjacent members" rule, or hold links.
mkdir -p "$work/wds"
cd "$work/wds"
head -c 5000 /dev/urandom > a.jpg; echo 1 > a.cls; head -c 6000 /dev/urandom > b.jpg; echo 2 > b.cls
# a.cls after b's members: an error naming the key and both offsets (a.jpg at 0; a.cls after
# a.jpg (512 + 5120) and b.jpg (512 + 6144) and b.cls (512 + 512)).
tar -cf "$work/split.tar" a.jpg b.jpg b.cls a.cls
for cmd in "convert $work/split.tar $work/split-ds" "inspect $work/split.tar --verify"; do
  if "$stoker" $cmd > "$work/out" 2> "$work/err"; then
    echo "stoker $cmd said OK on a tar whose sample a is split" >&2; exit 1
  fi
  grep -q "members of sample 'a' are not adjacent: one at offset 0, another at offset 13312" "$work/err" ||
    { echo "stoker $cmd:"; cat "$work/err"; exit 1; } >&2
done
# A hard link (GNU tar stores the second name of a file as a link to the first): read as the
# target's bytes, so sample c has a's image.
ln a.jpg c.jpg; echo 3 > c.cls
tar -cf "$work/links.tar" a.jpg a.cls b.jpg b.cls c.jpg c.cls
tar -tvf "$work/links.tar" | grep "c.jpg link to a.jpg" > /dev/null || { echo "no hard link made" >&2; exit 1; }
"$stoker" convert "$work/links.tar" "$work/links-ds" > /dev/null
"$stoker" inspect "$work/links-ds" --verify | grep "verify: OK, 3 records" > /dev/null
/usr/bin/python3 - "$work/links-ds" a.jpg <<'PY'
import glob, sys
shard = open(glob.glob(sys.argv[1] + "/*.stk")[0], "rb").read()
image = open(sys.argv[2], "rb").read()
assert shard.count(image) == 2, "hard-linked c.jpg does not hold a.jpg's bytes"
PY
# A symbolic link member: an error naming it and its target, not a silently missing field.
ln -s b.jpg d.jpg; echo 4 > d.cls
tar -cf "$work/symlink.tar" a.jpg a.cls d.jpg d.cls
if "$stoker" convert "$work/symlink.tar" "$work/sym-ds" > /dev/null 2> "$work/err"; then
  echo "convert said OK on a tar with a symbolic link" >&2; exit 1
fi
grep -q "offset 6656 (d.jpg) is a symbolic link (to b.jpg)" "$work/err" || { cat "$work/err" >&2; exit 1; }
if "$stoker" inspect "$work/symlink.tar" --verify > /dev/null 2>&1; then
  echo "inspect --verify said OK on a tar with a symbolic link" >&2; exit 1
fi
cd - > /dev/null

# Flip one byte inside the first record of the first shard: --verify must fail and say where.
printf '\xff' | dd of="$work/ds/shard-00000.stk" bs=1 seek=40 conv=notrunc status=none
if "$stoker" inspect "$work/ds" --verify > /dev/null 2> "$work/err"; then
  echo "inspect --verify passed on a corrupt shard" >&2; exit 1
fi
grep -q "shard-00000.stk: record at offset 16" "$work/err" || { cat "$work/err" >&2; exit 1; }

# `stoker run` with on_corrupt: skip leaves that record out and counts it in the skipped column.
cat > "$work/skip.json" <<JSON
{"source": {"dataset": "$work/ds/", "on_corrupt": "skip"}, "ops": []}
JSON
"$stoker" run "$work/skip.json" --print-keys > "$work/keys" 2> "$work/report"
[[ $(wc -l < "$work/keys") -eq 9 ]] || { echo "expected 9 keys after skipping one"; cat "$work/report"; exit 1; } >&2
[[ $(awk '$1 == "source" {print $NF}' "$work/report") == 1 ]] ||
  { echo "the source's skipped column is not 1:"; cat "$work/report"; exit 1; } >&2
# Short runs end while read-ahead reads are still landing: 20 of them must all end cleanly (an
# I/O thread once scheduled decode work on the pipeline's pool after the run had destroyed it,
# crashing about one run in seven).
for i in $(seq 20); do
  timeout 30 "$stoker" run "$work/skip.json" > /dev/null 2> "$work/report" ||
    { echo "run $i of the short pipeline failed:"; cat "$work/report"; exit 1; } >&2
done

# A damaged shard header fails `stoker run` when it opens the dataset (docs/format.md), even with
# on_corrupt: skip, for a small shard (header inside the tail read) and a large one (> 256 KiB).
mkdir -p "$work/bigtree/a"
for i in 1 2 3; do head -c 200000 /dev/urandom > "$work/bigtree/a/img$i.jpg"; done
"$stoker" convert "$work/bigtree" "$work/big" > /dev/null
for shard in "$work/ds/shard-00001.stk" "$work/big/shard-00000.stk"; do
  printf 'X' | dd of="$shard" bs=1 seek=0 conv=notrunc status=none
  ds=$(dirname "$shard")
  echo "{\"source\": {\"dataset\": \"$ds/\", \"on_corrupt\": \"skip\"}, \"ops\": []}" > "$work/hdr.json"
  if "$stoker" run "$work/hdr.json" --print-keys > "$work/keys" 2> "$work/err"; then
    echo "stoker run served a shard with a damaged header ($shard)" >&2; exit 1
  fi
  [[ ! -s "$work/keys" ]] || { echo "samples were served before the header check" >&2; exit 1; }
  grep -q "$(basename "$shard").*not a stoker shard (wrong magic at offset 0)" "$work/err" ||
    { cat "$work/err" >&2; exit 1; }
done
echo "format cli: OK"
