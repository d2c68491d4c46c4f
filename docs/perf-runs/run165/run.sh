#!/usr/bin/env bash
# Run 165 (docs/perf.md): two questions about the cuBLAS BF16 GEMMs the CUDA backend runs on
# kept / wgrad values, no plugin change.
# 1. lt_probe: cublasGemmStridedBatchedEx's default algorithm against every candidate of
#    cuBLASLt's heuristic on the anchor shapes' wgrad, forward and dgrad problems, as the
#    backend issues them (settled, the default timed right before each candidate).
# 2. b's wgrad on kept values (X 32x32) against wgrad on the quantizers' wgrad values: the same
#    cuBLAS call on the same values, 1610-1650 against 1533-1549 us in run 162. Each row alone
#    in its own bench process, alternated twice: is the gap the row's place in the bench?
# dist/ from scripts/dist.sh; one tarball, rewritten after each step.
set -u
dev_out="${OUT:-}"
export OUT=out/run165
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run165.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version,clocks.max.sm --format=csv > "$OUT/card.txt" 2>&1
cat "$OUT/card.txt"
P=docs/perf-runs/run165
if nvcc -O2 -arch=sm_90a $P/lt_probe.cu -lcublasLt -lcublas -o "$OUT/lt_probe" > "$OUT/nvcc.txt" 2>&1; then
    echo "built lt_probe here"
else
    cat "$OUT/nvcc.txt" | tail -5
    lib=$(dirname "$(find / -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
    echo "using the prebuilt probe with $lib"; cp dist/lt_probe "$OUT/lt_probe"; export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
fi
timeout 240 "$OUT/lt_probe" 2>&1 | tee "$OUT/lt_probe.txt"
pack
for i in 1 2; do
    for row in "X 32x32, values kept" "on their wgrad values"; do
        echo "== round $i: $row"
        timeout 60 dist/mxhost bench --device cuda --shapes b --only "$row" 2>&1 | grep -E "^b " | tee -a "$OUT/wgrad-rows.txt"
    done
done
pack
