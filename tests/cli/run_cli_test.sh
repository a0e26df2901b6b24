#!/usr/bin/env bash
# End-to-end test of `stoker run` (separate processes, as a user runs it): a generated JPEG folder
# converted to shards; the README's example spec; --print-keys shows each key exactly once
# per epoch; fused image ops give the bytes of the ops one by one (--digest); region decoding gives
# the bytes of a whole-image decode (--digest, "dct_scale": false); the same seed gives the same order at 1 and 2 threads; --checkpoint / --resume in a new
# process deliver exactly the rest of the epoch; a WebDataset tar stream; a bad spec's error.
# Usage: run_cli_test.sh STOKER MAKE_TEST_IMAGES
set -euo pipefail
stoker=$1
make_images=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$make_images" "$work/images" --classes 3 --per-class 20 --width 96 --height 72
"$stoker" convert "$work/images" "$work/shards" >/dev/null 2>&1

cat >"$work/spec.json" <<JSON
{
  "source": {"dataset": "$work/shards/"},
  "ops": [
    {"op": "shuffle", "seed": 7},
    {"op": "decode_image", "field": "jpg"},
    {"op": "random_resized_crop", "field": "jpg", "size": [32, 32]},
    {"op": "flip", "field": "jpg", "p": 0.5},
    {"op": "normalize", "field": "jpg", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    {"op": "batch", "size": 8},
    {"op": "prefetch", "buffer": 4}
  ]
}
JSON

# Each key exactly once per epoch, over 2 epochs.
"$stoker" run "$work/spec.json" --epochs 2 --print-keys >"$work/keys2" 2>"$work/report"
[[ $(wc -l <"$work/keys2") -eq 120 ]] || fail "expected 120 keys over 2 epochs"
[[ $(sort "$work/keys2" | uniq -c | awk '$1 != 2' | wc -l) -eq 0 ]] || fail "a key not seen exactly twice"
grep -q "samples/s" "$work/report" || fail "no throughput report"
[[ $(head -60 "$work/keys2") != $(tail -60 "$work/keys2") ]] || fail "epochs 0 and 1 have the same order"

# Same order at 1 and 2 threads.
"$stoker" run "$work/spec.json" --threads 1 --print-keys >"$work/t1" 2>/dev/null
"$stoker" run "$work/spec.json" --threads 2 --print-keys >"$work/t2" 2>/dev/null
cmp -s "$work/t1" "$work/t2" || fail "order differs between 1 and 2 threads"

# The fused image ops (decode + crop + flip + normalize written into the batch buffer in one pass)
# deliver the same bytes as the ops run one by one, at 2 threads over 2 epochs; also CHW and uint8.
# "fuse_image_ops": false in the spec runs them one by one.
unfused() { sed -e 's/^{/{"fuse_image_ops": false, /' "$1" >"$1.unfused"; echo "$1.unfused"; }
"$stoker" run "$work/spec.json" --epochs 2 --threads 2 --digest >"$work/fused" 2>"$work/fused_report"
"$stoker" run "$(unfused "$work/spec.json")" --epochs 2 --threads 2 --digest >"$work/plain" 2>"$work/plain_report"
grep -q "decode_image+random_resized_crop" "$work/plain_report" || fail "no region decode unfused"
! grep -q "+flip" "$work/plain_report" || fail "\"fuse_image_ops\": false still fused flip and normalize"
grep -q "^sha256 [0-9a-f]\{64\}$" "$work/fused" || fail "no digest printed"
cmp -s "$work/fused" "$work/plain" || fail "fused image ops give other bytes than the ops one by one"
grep -q "decode_image+random_resized_crop+flip+normalize" "$work/fused_report" || fail "not fused"
for normalize in '"layout": "CHW"' '"layout": "CHW", "dtype": "uint8"'; do
  sed -e "s/\"std\": \[0.229, 0.224, 0.225\]}/\"std\": [0.229, 0.224, 0.225], $normalize}/" \
    -e 's/"mean": \[0.485, 0.456, 0.406\], "std": \[0.229, 0.224, 0.225\], \("layout": "CHW", "dtype"\)/\1/' \
    "$work/spec.json" >"$work/variant.json"
  grep -q '"layout": "CHW"' "$work/variant.json" || fail "variant spec not written"
  "$stoker" run "$work/variant.json" --epochs 2 --digest >"$work/fused" 2>/dev/null
  "$stoker" run "$(unfused "$work/variant.json")" --epochs 2 --digest >"$work/plain" 2>/dev/null
  cmp -s "$work/fused" "$work/plain" || fail "fused image ops differ with $normalize"
done

# Region decoding: the fused decode_image + random_resized_crop decodes only the crop's window of
# each JPEG, and gives the bytes of decoding the whole image and cropping it ("dct_scale": false),
# for the same seed (docs/pipeline.md, "Region decoding"). Photo-like images of odd size, an
# output too large for a reduced DCT scale, 3 epochs (other windows each epoch), 2 threads.
"$make_images" "$work/photos" --classes 2 --per-class 24 --width 161 --height 119 --style photo
"$stoker" convert "$work/photos" "$work/photo_shards" >/dev/null 2>&1
sed -e "s|$work/shards/|$work/photo_shards/|" -e 's/"size": \[32, 32\]}/"size": [96, 96]}/' \
  "$work/spec.json" >"$work/region.json"
sed -e 's/"size": \[96, 96\]}/"size": [96, 96], "dct_scale": false}/' "$work/region.json" >"$work/whole.json"
grep -q '"dct_scale": false' "$work/whole.json" || fail "whole-decode spec not written"
grep -q 'photo_shards' "$work/region.json" || fail "region spec not written"
for spec in region whole; do
  "$stoker" run "$work/$spec.json" --epochs 3 --threads 2 --digest >"$work/$spec.digest" 2>/dev/null
  grep -q "^sha256 [0-9a-f]\{64\}$" "$work/$spec.digest" || fail "no digest for $spec"
done
cmp -s "$work/region.digest" "$work/whole.digest" ||
  fail "region decoding gives other bytes than decoding the whole image and cropping"
"$stoker" run "$(unfused "$work/region.json")" --epochs 3 --digest >"$work/region_plain.digest" 2>/dev/null
cmp -s "$work/region.digest" "$work/region_plain.digest" || fail "region decoding differs unfused"

# Checkpoint after 3 batches, resume in a new process: the union is exactly one epoch, in order.
"$stoker" run "$work/spec.json" --max-elements 3 --checkpoint "$work/token" --print-keys >"$work/a" 2>/dev/null
[[ -s "$work/token" ]] || fail "no checkpoint written"
"$stoker" run "$work/spec.json" --resume "$work/token" --print-keys >"$work/b" 2>/dev/null
cat "$work/a" "$work/b" | cmp -s - "$work/t1" || fail "checkpoint + resume is not exactly one epoch"

# A WebDataset tar stream, shard order shuffled.
(cd "$work/images" && tar cf "$work/part0.tar" class0 && tar cf "$work/part1.tar" class1 class2)
cat >"$work/tar.json" <<JSON
{"source": {"tar": ["$work/part0.tar", "$work/part1.tar"]},
 "ops": [{"op": "shuffle", "buffer": 16}, {"op": "decode_image", "field": "jpg"},
         {"op": "center_crop", "field": "jpg", "size": 64}, {"op": "batch", "size": 10}]}
JSON
"$stoker" run "$work/tar.json" --print-keys >"$work/tarkeys" 2>/dev/null
[[ $(sort -u "$work/tarkeys" | wc -l) -eq 60 && $(wc -l <"$work/tarkeys") -eq 60 ]] || fail "tar stream keys"

# A bad spec: the JSON path and what was expected, exit status 1.
echo '{"source": {"range": 3}, "ops": [{"op": "batch", "size": 0}]}' >"$work/bad.json"
if "$stoker" run "$work/bad.json" 2>"$work/err"; then fail "bad spec accepted"; fi
grep -q '\$.ops\[0\].size: expected an integer' "$work/err" || fail "bad spec message: $(cat "$work/err")"
echo PASS
