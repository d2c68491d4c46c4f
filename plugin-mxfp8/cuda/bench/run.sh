#!/usr/bin/env bash
# Build the benchmark launcher and run correctness + timing on the GPU machine.
# Usage (from the repository root): bash plugin-mxfp8/cuda/bench/run.sh [bench.py args]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUTDIR="${OUT:-/tmp}"
cd "$HERE"
PREBUILT="$HERE/../../../dist/libmxbench.so"  # scripts/dist.sh builds it where nvcc is installed
if [ -f "$PREBUILT" ] && [ -z "${MXBENCH_REBUILD:-}" ]; then
    cp "$PREBUILT" libmxbench.so
    cp "$HERE/../../../dist/libmxbench.ptxas.log" "$OUTDIR/ptxas.log" 2>/dev/null || true
    echo "using the prebuilt dist/libmxbench.so (MXBENCH_REBUILD=1 rebuilds it here)"
else
    nvcc -shared -Xcompiler -fPIC -gencode arch=compute_90a,code=sm_90a -O3 -I../include \
         -Xptxas -v -o libmxbench.so launch.cu > "$OUTDIR/ptxas.log" 2>&1 || { cat "$OUTDIR/ptxas.log"; exit 1; }
fi
grep -E "spill|C7514|warning" "$OUTDIR/ptxas.log" | sort | uniq -c | head -20 || true
PYTHONUNBUFFERED=1 python3 bench.py "$@"
