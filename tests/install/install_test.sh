#!/usr/bin/env bash
# The installed package, used as an outside project would (CTest install_test): installs this
# build into a temporary prefix, then
#   1. configures tests/install/consumer with find_package(stoker) against that prefix only,
#      builds a program (linked to stoker::stoker) and a transform plugin (examples/plugins/,
#      compiled against stoker::headers), and runs the program with the plugin;
#   2. compiles and links the same program with `pkg-config --cflags --libs stoker`
#      and runs it again.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
[[ -f $work/prefix/include/stoker/data/pipeline.h ]] || fail "public header not installed"
[[ ! -e $work/prefix/include/stoker/data/ops/op_util.h ]] || fail "an internal header was installed"
[[ -f $work/prefix/lib/cmake/stoker/stokerConfig.cmake ]] || fail "no CMake package"
[[ -f $work/prefix/lib/pkgconfig/stoker.pc ]] || fail "no pkg-config file"

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
echo "install_test: OK"
