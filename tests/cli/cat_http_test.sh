#!/usr/bin/env bash
# `stoker cat` over HTTP as docs/io.md shows it (run by CTest as cat_http_cli): an object of several
# parts plus an odd tail, served by nginx on 127.0.0.1, written to a file (also after other output,
# and appended), into a pipe (read slowly, so the parts queue behind the pipe), to /dev/null, and
# as byte ranges; every output is compared byte for byte with the original. A missing object and an
# offset past the end fail with a message naming the URL, a write that fails with one naming the
# output; a reader that goes away ends stoker with an error, not a hang.
set -euo pipefail
stoker=$1
source_dir=$2
work=$(mktemp -d)
server="$work/server"
cleanup() {
  "$source_dir/scripts/http-test-server" stop "$server" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$work/www" "$server"
# 9 MiB + 12,345 bytes: two full 4 MiB parts (or one 8 MiB one) and a short last part.
head -c $(( (9 << 20) + 12345 )) /dev/urandom > "$work/www/object.bin"
: > "$work/www/empty.bin"
"$source_dir/scripts/http-test-server" start "$server" "$work/www" > /dev/null
url=$("$source_dir/scripts/http-test-server" url "$server")object.bin

"$stoker" cat "$url" > "$work/out.bin"
cmp "$work/www/object.bin" "$work/out.bin" || fail "cat to a file differs"
# 72 MiB + 1 byte to a file: enough parts that the parts in flight start at 2 over the loopback
# and are doubled, measured and kept or taken back while the file fills (docs/io.md).
head -c $(( (72 << 20) + 1 )) /dev/urandom > "$work/www/large.bin"
"$stoker" cat "${url%object.bin}large.bin" > "$work/large.out"
cmp "$work/www/large.bin" "$work/large.out" || fail "cat of 19 parts to a file differs"
rm "$work/www/large.bin" "$work/large.out"

# Into a pipe whose reader takes its time (dd with small blocks): the bytes stay in order.
"$stoker" cat "$url" | dd bs=4096 status=none | cmp - "$work/www/object.bin" || fail "cat | dd differs"
"$stoker" cat "$url" > /dev/null || fail "cat to /dev/null failed"

for range in "0 1" "1048575 2" "1048576 1048576" "5000000 4000000" "$(( (9 << 20) + 12000 )) 1000"; do
  set -- $range
  "$stoker" cat "$url" --offset "$1" --length "$2" > "$work/range.bin"
  dd if="$work/www/object.bin" iflag=skip_bytes,count_bytes skip="$1" count="$2" bs=1M \
    status=none | cmp - "$work/range.bin" || fail "range offset $1 length $2 differs"
done
# A file takes each part in place as it arrives (positioned writes, docs/io.md): after other
# output, two objects in a row, and appended (>>, which writes in order instead), the bytes land
# where a plain write would have put them.
{ printf 'head'; "$stoker" cat "$url" --offset 3 --length 5000000; "$stoker" cat "$url" --length 10; } \
  > "$work/concat.bin"
{ printf 'head'; dd if="$work/www/object.bin" iflag=skip_bytes,count_bytes skip=3 count=5000000 \
    bs=1M status=none; head -c 10 "$work/www/object.bin"; } | cmp - "$work/concat.bin" \
  || fail "cat after other output, twice into one file, differs"
printf 'x' > "$work/append.bin"
"$stoker" cat "$url" >> "$work/append.bin"
{ printf 'x'; cat "$work/www/object.bin"; } | cmp - "$work/append.bin" || fail "cat >> differs"
# A write that fails (the file size limit, 1 MiB; SIGXFSZ ignored so the write returns EFBIG):
# stoker says so and exits non-zero.
if (trap '' XFSZ; ulimit -f 1024; "$stoker" cat "$url" > "$work/limited.bin") 2> "$work/err"; then
  fail "cat past the file size limit succeeded"
fi
grep -qF "cannot write to standard output" "$work/err" || fail "write error message: $(cat "$work/err")"

"$stoker" cat "${url%object.bin}empty.bin" > "$work/empty.out"
[[ ! -s "$work/empty.out" ]] || fail "an empty object gave bytes"

if "$stoker" cat "${url%object.bin}missing.bin" > /dev/null 2> "$work/err"; then
  fail "cat of a missing object succeeded"
fi
grep -qF "missing.bin" "$work/err" || fail "missing object message: $(cat "$work/err")"
if "$stoker" cat "$url" --offset $(( 10 << 20 )) > /dev/null 2> "$work/err"; then
  fail "cat past the end succeeded"
fi
grep -qF "past the end" "$work/err" || fail "past-the-end message: $(cat "$work/err")"

# The reader exits after the first bytes: stoker must end (SIGPIPE or an error), not hang.
set +o pipefail
timeout 60 bash -c "\"$stoker\" cat \"$url\" | head -c 10 > /dev/null"
status=${PIPESTATUS[0]}
[[ $status -ne 124 ]] || fail "stoker cat hung after its reader went away"
echo "cat_http_cli: ok"
