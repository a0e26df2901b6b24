#!/usr/bin/env bash
# Plugins only by the operator's choice (docs/security.md), with real processes: a worker started
# without --plugin-dir refuses a client's spec that names a plugin, and the consumer gets an error
# saying why; a worker whose --plugin-dir holds the library runs it; a symbolic link placed in the
# allowed folder that points outside it is refused too.
# Usage: plugin_cli_test.sh STOKER PLUGIN_LIBRARY
set -euo pipefail
stoker=$1
plugin=$2
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Starts a dispatcher and one worker with the given worker flags; sets $address.
start_service() {
  # The redirections below happen in the background processes, maybe after the greps: remove the
  # previous run's files first, or the greps may read the last dispatcher's port.
  rm -f "$work/dispatcher.out" "$work/worker.out"
  "$stoker" dispatcher --port 0 --http-port 0 > "$work/dispatcher.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "serving on port" "$work/dispatcher.out" && break; sleep 0.1; done
  address="127.0.0.1:$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$work/dispatcher.out")"
  "$stoker" worker --dispatcher "$address" "$@" > "$work/worker.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "serving on" "$work/worker.out" && break; sleep 0.1; done
}
stop_service() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
spec_naming() {  # PLUGIN_PATH
  cat > "$work/spec.json" <<JSON
{"plugins": ["$1"], "source": {"range": 4},
 "ops": [{"op": "cast", "field": "value", "to": "uint8"}, {"op": "invert", "field": "value"}]}
JSON
}

# 1. No --plugin-dir (the default): refused, and the consumer's error says what to do.
start_service
spec_naming "$plugin"
if timeout 60 "$stoker" consume --dispatcher "$address" "$work/spec.json" > "$work/out" 2> "$work/err"; then
  fail "a worker without --plugin-dir ran a spec naming a plugin"
fi
grep -q "plugin '$plugin' is refused" "$work/err" || fail "consumer's message: $(cat "$work/err")"
grep -q -- "--plugin-dir (none, so no plugin at all)" "$work/err" || fail "message: $(cat "$work/err")"
stop_service

# 2. The operator allows a folder holding the library: the plugin runs on the worker.
mkdir -p "$work/allowed" "$work/elsewhere"
cp "$plugin" "$work/allowed/libinvert.so"
start_service --plugin-dir "$work/allowed"
spec_naming "$work/allowed/libinvert.so"
timeout 60 "$stoker" consume --dispatcher "$address" "$work/spec.json" > "$work/out" 2> "$work/err" ||
  fail "an allowed plugin failed: $(cat "$work/err")"
grep -q "4 elements" "$work/out" "$work/err" || fail "expected 4 elements: $(cat "$work/out" "$work/err")"

# 3. Paths that lead outside the allowed folder: refused, whatever the spelling.
cp "$plugin" "$work/elsewhere/libinvert.so"
ln -s "$work/elsewhere/libinvert.so" "$work/allowed/link.so"
for path in "$work/elsewhere/libinvert.so" "$work/allowed/../elsewhere/libinvert.so" "$work/allowed/link.so"; do
  spec_naming "$path"
  if timeout 60 "$stoker" consume --dispatcher "$address" "$work/spec.json" > "$work/out" 2> "$work/err"; then
    fail "plugin $path outside the allowed folder was loaded"
  fi
  grep -q "is refused" "$work/err" || fail "message for $path: $(cat "$work/err")"
done
stop_service
echo "plugin cli: OK"
