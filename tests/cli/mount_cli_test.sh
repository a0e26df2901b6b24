#!/usr/bin/env bash
# `stoker mount` refuses a mount point that is not an existing empty folder, before anything is
# mounted or forked (run by CTest as mount_cli; needs no /dev/fuse): a regular file, a folder with
# files in it, a missing path. Each fails with a message naming the mount point, leaves no process
# behind, and leaves the folder's files visible.
set -euo pipefail
stoker=$1
work=$(mktemp -d)
trap 'fusermount3 -u "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$work/src"
echo hello > "$work/src/a.txt"

expect_refused() {  # MOUNTPOINT MESSAGE
  if "$stoker" mount "$work/src" "$1" > "$work/out" 2> "$work/err"; then
    fusermount3 -u "$1" 2>/dev/null || true
    fail "stoker mount accepted $1"
  fi
  grep -qF "$2" "$work/err" || fail "message for $1: $(cat "$work/err")"
  # No background mount process stayed behind for this mount point.
  if ps -eo args= | grep -F -- "mount $work/src $1" | grep -v grep > /dev/null; then
    fail "a mount process for $1 is still running"
  fi
}

echo "not a folder" > "$work/file"
expect_refused "$work/file" "mount point $work/file is not a folder"
mkdir -p "$work/busy"
echo "keep me" > "$work/busy/notes.txt"
expect_refused "$work/busy" "mount point $work/busy is not empty (it holds 'notes.txt'"
[[ $(cat "$work/busy/notes.txt") == "keep me" ]] || fail "the folder's file is hidden or changed"
expect_refused "$work/missing" "mount point $work/missing: No such file or directory"

# After the mount process died (kill -9), the mount point is a dead FUSE mount: `stoker mount`
# says to run `fusermount3 -u`, which recovers it (docs/mount.md). Needs /dev/fuse.
if [[ -w /dev/fuse ]] && command -v fusermount3 > /dev/null; then
  mkdir -p "$work/mnt"
  "$stoker" mount "$work/src" "$work/mnt"
  [[ $(cat "$work/mnt/a.txt") == hello ]] || fail "mount does not serve a.txt"
  pid=$(ps -eo pid=,args= | grep -F -- "mount $work/src $work/mnt" | grep -v grep | awk '{print $1}')
  [[ -n "$pid" ]] || fail "no mount process found"
  kill -9 $pid
  for _ in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if ls "$work/mnt" > /dev/null 2>&1; then fail "the mount still answers after its process died"; fi
  expect_refused "$work/mnt" "is a FUSE mount whose process died"
  expect_refused "$work/mnt" "unmount it first with \`fusermount3 -u $work/mnt\`"
  fusermount3 -u "$work/mnt"
  "$stoker" mount "$work/src" "$work/mnt"
  [[ $(cat "$work/mnt/a.txt") == hello ]] || fail "remount after recovery does not serve a.txt"
  fusermount3 -u "$work/mnt"
else
  echo "no writable /dev/fuse: the dead-mount recovery part is not run"
fi
echo "mount cli: OK"
