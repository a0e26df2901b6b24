#!/usr/bin/env bash
# Builds the device check here (no GPU needed) and packs what the GPU machine needs into one
# folder: the CUDA build's test and check programs (static CUDA runtime) and the shared libraries
# they use that a bare CUDA image may lack. Then, on the GPU machine, from the repository root:
#   bash bench/gpu/run_device_check.sh build-gpu-carry
# (docs/gpu.md; with this workplace's device tool: carry ["build-gpu-carry"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-cuda}
CARRY=${CARRY:-build-gpu-carry}
JOBS=${JOBS:-2}
NVCC=${NVCC:-$(ls "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" 2>/dev/null || command -v nvcc)}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}

cmake -S . -B "$BUILD" -G Ninja -DSTOKER_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target cuda_test stoker_gpu_check

rm -rf "$CARRY"
mkdir -p "$CARRY/lib"
for program in "$BUILD/src/stoker/gpu/cuda_test" "$BUILD/stoker_gpu_check"; do
  strip -o "$CARRY/$(basename "$program")" "$program"
done
# Every shared library but the C and C++ runtimes (the GPU machine's own are newer, and
# compatible) and the CUDA driver (which must be the machine's).
ldd "$CARRY"/cuda_test "$CARRY"/stoker_gpu_check | awk '/=> \// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$CARRY/lib/"; done
strip "$CARRY"/lib/*.so* 2>/dev/null || true
du -sh "$CARRY"
