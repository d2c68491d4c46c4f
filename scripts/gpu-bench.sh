#!/usr/bin/env bash
# The GPU run behind docs/perf.md's end-to-end tables, on a GPU machine (no Rust there),
# from the repository root with dist/ built by scripts/dist.sh. Logs go to $OUT (or
# out/gpu). Everything runs in one call so every ratio is taken side by side:
#   1. mxhost selftest (CUDA vs the CPU backend), TMA kernels, launches traced;
#   2. bench_peers.py (torch _grouped_mm BF16 and the other peers) → peer_bench.csv;
#   3. mxhost bench with the TMA kernels and with the cp.async kernels, × BF16 from 2.;
#   4. optionally the kernel harness (HARNESS_ARGS), then hello-gemm and a shortened
#      toy-moe with --device cuda.
set -uo pipefail
out="${OUT:-out/gpu}"
mkdir -p "$out"
shapes="${SHAPES:-a,b,c,d}"
nvidia-smi -L
echo "== selftest (tgemm)"
trace=$(mktemp)
MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 150 dist/mxhost selftest --device cuda --quick \
    >"$out/selftest.txt" 2>"$trace"
rc=$?
# (At most 8 files come back from a device call: the trace is summarised, not kept.)
echo "selftest rc=$rc; tgemm launches: $(grep -c mx_tgemm "$trace"), cp.async launches: $(grep -c 'mx_gemm_' "$trace"), fallbacks: $(grep -ci fallback "$trace")" | tee -a "$out/selftest.txt"
grep -i fallback "$trace" | sort | uniq -c | head -5
grep -E "kernel family|FAIL|passed|failed" "$out/selftest.txt" | tail -6
echo "== bench_peers.py"
OUT="$out" timeout 150 python3 dist/bench_peers.py --shapes "$shapes" --budget-s "${PEER_BUDGET_S:-70}" >"$out/peers.txt" 2>&1
echo "peers rc=$?"
for k in tgemm gemm; do
    echo "== mxhost bench ($k)"
    MXHOST_MX_GEMM_KERNEL=$k timeout 120 dist/mxhost bench --device cuda --shapes "$shapes" --reps "${REPS:-10}" \
        --peers "$out/peer_bench.csv" --json "$out/bench_$k.json" 2>&1
done
if [ -n "${HARNESS_ARGS:-}" ]; then
    # The kernel harness (plugin-mxfp8/cuda/bench), e.g. HARNESS_ARGS="--shapes a,c --rep 20 --variants _v2 --gemm-only".
    echo "== kernel harness: $HARNESS_ARGS"
    timeout "${HARNESS_TIMEOUT_S:-150}" bash plugin-mxfp8/cuda/bench/run.sh $HARNESS_ARGS >"$out/harness.txt" 2>&1
    echo "harness rc=$?"; tail -40 "$out/harness.txt"
fi
echo "== hello-gemm (cuda)"
timeout 60 dist/mxhost run dist/hello-gemm.wasm --device cuda 2>&1 | tail -12
echo "== toy-moe (cuda)"
timeout 120 dist/mxhost run dist/toy-moe.wasm --device cuda --out "$out/toy" -- --steps "${TOY_STEPS:-100}" 2>&1 | tail -8
