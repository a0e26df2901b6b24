#!/usr/bin/env bash
# The installed package, used as an outside project would (CTest install_test): installs this
# build into a temporary prefix, then
#   1. configures tests/install/consumer with find_package(stoker) against that prefix only,
#      builds a program (linked to stoker::stoker) and a transform plugin (examples/plugins/,
#      compiled against stoker::headers), and runs the program with the plugin;
#   2. compiles and links the same program with `pkg-config --cflags --libs stoker`
#      and runs it again;
#   3. when the package has the service's consumer (stoker/service/consumer.h): starts the
#      installed `stoker dispatcher` and `stoker worker`, runs the consumer project's
#      stoker_service_consumer against them (every key of a range pipeline exactly once, across a
#      checkpoint and resume), and compiles (pkg-config) and runs the example of docs/protocol.md.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
[[ -f $work/prefix/include/stoker/data/pipeline.h ]] || fail "public header not installed"
[[ ! -e $work/prefix/include/stoker/data/ops/op_util.h ]] || fail "an internal header was installed"
[[ -f $work/prefix/lib/cmake/stoker/stokerConfig.cmake ]] || fail "no CMake package"
[[ -f $work/prefix/lib/pkgconfig/stoker.pc ]] || fail "no pkg-config file"
[[ -x $work/prefix/bin/stoker ]] || fail "the stoker command was not installed"

# 1. CMake: only the install prefix, never this source or build tree.
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DSTOKER_PLUGIN_SOURCE="$src/examples/plugins/invert_plugin.cc" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure against the installed package"; }
if grep -q -e "$src/src" -e "$src/include" "$work/consumer/compile_commands.json"; then
  fail "the consumer compiled against the source tree"
fi
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build against the installed package"; }
out=$("$work/consumer/stoker_consumer" "$work/consumer/libconsumer_plugin.so")
[[ $out == ok ]] || fail "consumer printed '$out'"

# 2. pkg-config.
export PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs stoker) || fail "pkg-config stoker"
g++ -std=c++20 -rdynamic -o "$work/consumer_pc" "$src/tests/install/consumer/main.cc" $flags \
  2>"$work/pc.log" || { cat "$work/pc.log"; fail "compile and link with pkg-config"; }
out=$("$work/consumer_pc" "$work/consumer/libconsumer_plugin.so")
[[ $out == ok ]] || fail "pkg-config consumer printed '$out'"

# 3. The service, through the public consumer, against the installed binaries.
if [[ ! -f $work/prefix/include/stoker/service/consumer.h ]]; then
  [[ ! -e $work/consumer/stoker_service_consumer ]] || fail "a service consumer without its header"
  echo "install_test: the installed package has no service (built without src/stoker/service):" \
    "the service consumer part is skipped"
  echo "install_test: OK"
  exit 0
fi
[[ -x $work/consumer/stoker_service_consumer ]] ||
  fail "the package installed stoker/service/consumer.h but find_package(stoker) did not set stoker_HAS_SERVICE"
if grep -E '^#include .*(grpc|protobuf|\.pb\.h|/src/)' "$work/prefix/include/stoker/service/consumer.h"; then
  fail "the public consumer.h includes a gRPC, protobuf or internal header"
fi
stoker=$work/prefix/bin/stoker
"$stoker" dispatcher --port 0 --http-port 0 >"$work/dispatcher.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "serving on port" "$work/dispatcher.out" && break; sleep 0.1; done
port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$work/dispatcher.out")
[[ -n $port ]] || { cat "$work/dispatcher.out"; fail "the installed dispatcher did not start"; }
address=127.0.0.1:$port
"$stoker" worker --dispatcher "$address" >"$work/worker.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "serving on" "$work/worker.out" && break; sleep 0.1; done
grep -q "serving on" "$work/worker.out" || { cat "$work/worker.out"; fail "the installed worker did not start"; }

out=$(timeout 120 "$work/consumer/stoker_service_consumer" "$address" 2>"$work/service.err") ||
  { cat "$work/service.err" "$work/worker.out"; fail "the service consumer failed"; }
[[ $out == ok ]] || fail "the service consumer printed '$out'"
echo "install_test: the service consumer read every key once, across a checkpoint, from $address"

# The C++ example of docs/protocol.md: the c++ block after the line that names this test.
awk '/compiled and run by tests\/install\/install_test.sh/ {found = 1; next}
     found && /^```c\+\+/ {inside = 1; next}
     inside && /^```/ {exit}
     inside {print}' "$src/docs/protocol.md" >"$work/doc_example.cc"
grep -q "stoker/service/consumer.h" "$work/doc_example.cc" || fail "no C++ example found in docs/protocol.md"
g++ -std=c++20 -o "$work/doc_example" "$work/doc_example.cc" $flags 2>"$work/doc.log" ||
  { cat "$work/doc.log"; fail "the example of docs/protocol.md does not compile against the installed package"; }
out=$(timeout 120 "$work/doc_example" "$address" '{"source": {"range": 50}}' 2>"$work/doc.err") ||
  { cat "$work/doc.err"; fail "the example of docs/protocol.md failed"; }
[[ $out == "50 samples" ]] || fail "the example of docs/protocol.md printed '$out', not '50 samples'"
echo "install_test: the example of docs/protocol.md compiled and read 50 samples"
echo "install_test: OK"
