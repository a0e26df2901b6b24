#!/usr/bin/env bash
# The device check of docs/gpu.md, on a machine with a CUDA GPU, from the repository root:
#   bash bench/gpu/run_device_check.sh [CARRY]      (CARRY: what prepare_device_check.sh packed)
# Writes $OUT/gpu.md (default OUT=/tmp/stoker-gpu-check): the Markdown for bench/results/gpu.md,
# plus the logs. About two minutes on an H200; nothing is installed.
set -uo pipefail
cd "$(dirname "$0")/../.."
CARRY=${1:-build-gpu-carry}
OUT=${OUT:-/tmp/stoker-gpu-check}
mkdir -p "$OUT"
# The carried libraries serve the carried programs only (not the machine's python3).
carried() { LD_LIBRARY_PATH="$PWD/$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
status=0

{
  echo "# The GPU path on a real device"
  echo
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') by \`bench/gpu/run_device_check.sh\` (docs/gpu.md)"
  echo "with the programs \`bench/gpu/prepare_device_check.sh\` built (CUDA $("${CUDA_HOME:-/usr/local/cuda}"/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' | head -1) build machine, static CUDA runtime)."
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1);"
  echo "$(nproc) CPU cores; load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
} >"$OUT/gpu.md"

echo "== cuda_test (DeviceBatcher and kernels against the CPU reference)"
if carried "$CARRY/cuda_test" 2>&1 | tee "$OUT/cuda_test.log"; then
  verdict="all passed"
else
  verdict="FAILED (see cuda_test.log)"
  status=1
fi
passed=$(grep -c '^\[       OK \]' "$OUT/cuda_test.log" || true)
skipped=$(grep -c '^\[  SKIPPED \] [A-Z]' "$OUT/cuda_test.log" || true)
echo "Unit tests of the CUDA build (\`cuda_test\`): $verdict ($passed passed, $skipped skipped)." >>"$OUT/gpu.md"
echo >>"$OUT/gpu.md"

echo "== stoker_gpu_check"
if ! carried "$CARRY/stoker_gpu_check" "${@:2}" 2>"$OUT/gpu_check.err" | tee "$OUT/gpu_check.md"; then
  status=1
fi
cat "$OUT/gpu_check.err" >&2
cat "$OUT/gpu_check.md" >>"$OUT/gpu.md"

echo "== torch's own copies (the image's python3, if it has torch with CUDA)"
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  python3 bench/gpu/torch_h2d.py 2>&1 | tee "$OUT/torch_h2d.md" && cat "$OUT/torch_h2d.md" >>"$OUT/gpu.md"
else
  echo "(no python3 with torch and CUDA here: torch's own figures are left out)" | tee -a "$OUT/gpu.md"
fi
echo "wrote $OUT/gpu.md"
exit $status
