#!/usr/bin/env bash
# Run 144 (docs/perf.md): why c's dgrad under `on` read 13–20 % slower than its forward in run
# 141 (H200) though the shapes and kernels match. From the repository root with dist/ built by
# scripts/dist.sh (carry ["dist"]), ~150 s:
#   0. a GEMM trace of both rows (annexes read or operands re-encoded in the call);
#   1. ncu, every kernel of one rep each of c's forward and dgrad rows (pre-quantized, Wᵀ copy)
#      under `on` (scripts/gpu-breakdown.sh: per call and per kernel);
#   2. each of the two bench rows alone in its own process, alternating, three rounds (`--only`
#      keeps the bench's row order, so a row alone is the way to take its place in the sequence
#      out of the comparison).
set -u
out="${OUT:-out/run144}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$out/card.txt"
fwd="forward X 1x32 · W 32x32 (pre"
dgrad="(transposed copy)"   # (the one row with these words)
# which kernel computed each GEMM, and whether it read annexes or re-encoded in the call
MXHOST_MX_CHAIN=on MXHOST_MX_GEMM_TRACE=1 timeout 60 dist/mxhost bench --device cuda --shapes c --reps 2 \
    --warmup-ms 0 --only "$fwd,$dgrad" >"$out/trace.txt" 2>&1
grep -E "GEMM mx_|chained gate|not taken" "$out/trace.txt" | sort | uniq -c | cut -c1-220
OUT="$out" SHAPES=c MODE=on TAG=fwd ONLY="$fwd" bash scripts/gpu-breakdown.sh
OUT="$out" SHAPES=c MODE=on TAG=dgrad ONLY="$dgrad" bash scripts/gpu-breakdown.sh
for i in 1 2 3; do
    for row in "$fwd" "$dgrad"; do
        MXHOST_MX_CHAIN=on timeout 60 dist/mxhost bench --device cuda --shapes c --reps 10 \
            --warmup-ms 300 --only "$row" 2>/dev/null | grep -E "^c " | sed "s/^/round $i: /"
    done
done | tee "$out/alone.txt"
# 3. the default selftest: its "repeated" case now uploads its operands once (not yet run on a GPU)
echo "== default selftest"
MXHOST_REQUIRE_CUDA=1 timeout 150 dist/mxhost selftest --device cuda --quick >"$out/selftest-default.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-default.txt"; grep FAIL "$out/selftest-default.txt" | head -5
