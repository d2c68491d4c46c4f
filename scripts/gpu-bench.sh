#!/usr/bin/env bash
# The GPU run behind docs/perf.md's end-to-end tables, on a GPU machine (no Rust there),
# from the repository root with dist/ built by scripts/dist.sh. Logs go to $OUT (or
# out/gpu). Everything runs in one call so every ratio is taken side by side:
#   1. mxhost selftest (CUDA vs the CPU backend), TMA kernels, launches traced; the bf16
#      plugin's; the portable build's (NO_PORTABLE=1 skips it: the software FP8
#      conversion checked on all 2^32 inputs, then the selftest with MXHOST_MX_PORTABLE);
#   2. bench_peers.py (torch _grouped_mm BF16 and the other peers) → peer_bench.csv;
#   3. mxhost bench (FAMILIES="tgemm gemm" adds the cp.async kernels; FWD_FP8_TOO=1 repeats
#      forward/dgrad/step with MXHOST_MX_FWD_DGRAD=fp8; BACK_TO_BACK_TOO=1
#      repeats it timed as the mean of back-to-back calls; PORTABLE_BENCH=1 adds the
#      portable build; CHAIN_TOO=1 adds a selftest and a bench with the chained forward/dgrad,
#      MXHOST_MX_CHAIN=always / on) and the bf16 plugin (cuBLAS) in process, × BF16 from 2.;
#   (NO_SELFTEST=1 skips 1., e.g. for a second device call of the same commit);
#   4. optionally the kernel harness (HARNESS_ARGS), then hello-gemm and a shortened
#      toy-moe with --device cuda.
set -uo pipefail
out="${OUT:-out/gpu}"
mkdir -p "$out"
shapes="${SHAPES:-a,b,c,d}"
# cuBLAS for the bf16 plugin: the toolkit's libraries when they are not on the default path.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi -L
if [ -z "${NO_SELFTEST:-}" ]; then
echo "== selftest (tgemm), outputs poisoned with NaN before each plugin call"
trace=$(mktemp)
MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 150 dist/mxhost selftest --device cuda --quick \
    >"$out/selftest.txt" 2>"$trace"
rc=$?
# (At most 8 files come back from a device call: the trace is summarised, not kept.)
echo "selftest rc=$rc; tgemm launches: $(grep -c mx_tgemm "$trace"), cp.async launches: $(grep -c 'mx_gemm_' "$trace"), fallbacks: $(grep -ci fallback "$trace"), forward/dgrad on kept values: $(grep -c "A's kept, B's kept" "$trace")" | tee -a "$out/selftest.txt"
grep -i fallback "$trace" | sort | uniq -c | head -5
grep -E "kernel family|FAIL|passed|failed" "$out/selftest.txt" | tail -6
echo "== selftest, forward/dgrad forced onto dequantize-to-BF16 + cuBLAS (MXHOST_MX_FWD_DGRAD=bf16; auto takes it for large experts only), outputs poisoned"
MXHOST_MX_FWD_DGRAD=bf16 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 150 \
    dist/mxhost selftest --device cuda --quick --shapes a >>"$out/selftest.txt" 2>"$trace"
echo "fwd/dgrad-bf16 selftest rc=$?; tgemm launches: $(grep -c mx_tgemm "$trace"), forward/dgrad via bf16: $(grep -c 'rows GEMM' "$trace"), dense operands fake-quantized in one pass: $(grep -c 'mx_fakequant_rows' "$trace")" | tee -a "$out/selftest.txt"
grep -E "FAIL|checks," "$out/selftest.txt" | tail -2
if [ -n "${CHAIN_TOO:-}" ]; then
    # The chained forward/dgrad (MXHOST_MX_CHAIN, off by default): `always` puts every
    # correction through it (no residual limit); NaN and overflowing operands still go to
    # the per-k32 kernel, gated on the device.
    echo "== selftest, chained forward/dgrad (MXHOST_MX_CHAIN=always), outputs poisoned"
    MXHOST_MX_CHAIN=always MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 150 \
        dist/mxhost selftest --device cuda --quick >>"$out/selftest.txt" 2>"$trace"
    echo "chained selftest rc=$?; chained launches: $(grep -c ', chained;' "$trace") (gate open: $(grep -c 'chained gate open' "$trace"), closed: $(grep -c 'chained gate closed' "$trace")), not taken: $(grep -c 'chained GEMM not taken' "$trace"), tgemm launches: $(grep -c mx_tgemm "$trace")" | tee -a "$out/selftest.txt"
    grep 'chained GEMM not taken' "$trace" | sed 's/.*): //' | sort | uniq -c | head -6
    # (`always` must put the selftest's chained launches through the chained kernel: only the
    # NaN/overflow case closes the gate, so a run with no open gate is a broken gate.)
    [ "$(grep -c 'chained gate open' "$trace")" -gt 0 ] || echo "FAIL: no chained launch computed its output"
    grep 'chained gate closed' "$trace" | sed 's/.*closed (//; s/):.*//; s/[0-9]* residuals > limit [0-9]*/N residuals > limit/' | sort | uniq -c | head -4
    grep -E "FAIL|checks," "$out/selftest.txt" | tail -2
fi
echo "== selftest, plugin bf16 (cuBLAS vs CPU), outputs poisoned"
MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 120 dist/mxhost selftest --device cuda --quick \
    --plugin bf16 --shapes "${BF16_SELFTEST_SHAPES:-d,c}" >>"$out/selftest.txt" 2>&1
echo "bf16 selftest rc=$?"
grep -E "FAIL|checks,|does not quantize" "$out/selftest.txt" | tail -4
if [ -z "${NO_PORTABLE:-}" ]; then
    # The portable build (what GPUs other than Hopper run), forced on this card with
    # MXHOST_MX_PORTABLE (default 1 = compute_80 PTX: every software fallback).
    parch="${PORTABLE_ARCH:-1}"
    echo "== portable build: software FP32->FP8 conversion vs the hardware one on all 2^32 inputs"
    nvcc -gencode arch=compute_90a,code=sm_90a -O3 -Iplugin-mxfp8/cuda/include -o "$trace.fp8check" \
        plugin-mxfp8/cuda/bench/fp8_encode_check.cu && "$trace.fp8check" | tee -a "$out/selftest.txt"
    echo "== selftest, portable build (MXHOST_MX_PORTABLE=$parch), outputs poisoned"
    MXHOST_MX_PORTABLE=$parch MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 150 \
        dist/mxhost selftest --device cuda --quick >>"$out/selftest.txt" 2>"$trace"
    rc=$?
    echo "portable selftest rc=$rc; tgemm launches: $(grep -c mx_tgemm "$trace"), cp.async launches: $(grep -c 'mx_gemm_' "$trace"), forward/dgrad via bf16: $(grep -c 'rows GEMM' "$trace"), fake-quantized in one pass: $(grep -c 'mx_fakequant_rows' "$trace")" | tee -a "$out/selftest.txt"
    grep -E "kernel family|FAIL|checks," "$out/selftest.txt" | tail -3
fi
fi  # NO_SELFTEST
echo "== bench_peers.py"
# WARMUP_MS (default 1500): both sides timed with the card's power limiter settled (docs/perf.md
# runs 74-75, 159-161): bench_peers.py --warmup and mxhost bench --warmup-ms of that length.
# WARMUP_MS=0: the short warm-ups of runs before 75 (bench_peers.py's defaults).
WARMUP_MS="${WARMUP_MS:-1500}"
peer_timing=()
if [ "$WARMUP_MS" != 0 ]; then peer_timing=(--warmup "$WARMUP_MS" --rep 500); fi
# (PEER_BUDGET_S per shape: scripts/gpu-peers.sh runs the shapes one by one)
bash scripts/gpu-peers.sh "$out" "$shapes" "${PEER_BUDGET_S:-60}" ${peer_timing[@]+"${peer_timing[@]}"}
echo "peers rc=$?"
for k in ${FAMILIES:-tgemm}; do
    echo "== mxhost bench ($k)"
    MXHOST_MX_GEMM_KERNEL=$k timeout 300 dist/mxhost bench --device cuda --shapes "$shapes" --reps "${REPS:-10}" \
        --warmup-ms "$WARMUP_MS" \
        --peers "$out/peer_bench.csv" --json "$out/bench_$k.json" 2>&1
done
if [ -n "${BACK_TO_BACK_TOO:-}" ]; then
    echo "== mxhost bench (tgemm), timed as the mean of back-to-back calls (--back-to-back) for comparison"
    timeout 300 dist/mxhost bench --device cuda --shapes "$shapes" --reps "${REPS:-10}" --back-to-back \
        --warmup-ms "$WARMUP_MS" --peers "$out/peer_bench.csv" 2>&1
fi
if [ -n "${FWD_FP8_TOO:-}" ]; then
    echo "== mxhost bench (tgemm), forward/dgrad always on the FP8 kernel (MXHOST_MX_FWD_DGRAD=fp8) for comparison"
    MXHOST_MX_FWD_DGRAD=fp8 timeout 300 dist/mxhost bench --device cuda --shapes "$shapes" --reps "${REPS:-10}" \
        --warmup-ms "$WARMUP_MS" --peers "$out/peer_bench.csv" 2>&1 | grep -E "shape|forward|dgrad|step"
fi
if [ -n "${CHAIN_TOO:-}" ]; then
    echo "== mxhost bench (tgemm), forward/dgrad on the chained GEMM where it applies (MXHOST_MX_CHAIN=on) for comparison"
    # The gate's decisions on the bench's operands (the trace synchronizes: one rep, untimed).
    MXHOST_MX_CHAIN=on MXHOST_MX_GEMM_TRACE=1 timeout 200 dist/mxhost bench --device cuda --shapes "$shapes" --reps 1 \
        --warmup-ms 0 2>&1 >/dev/null | grep -E 'chained gate' | sed 's/^mxhost-plugin-mxfp8: //' | sort | uniq -c | head -12
    MXHOST_MX_CHAIN=on timeout 300 dist/mxhost bench --device cuda --shapes "$shapes" --reps "${REPS:-10}" \
        --warmup-ms "$WARMUP_MS" --peers "$out/peer_bench.csv" --json "$out/bench_chain.json" 2>&1 | grep -E "shape|forward|dgrad|step"
fi
if [ -n "${WGRAD_FP8_TOO:-}" ]; then
    echo "== mxhost bench (tgemm), wgrad on the FP8 kernel (MXHOST_MX_WGRAD=fp8) for comparison"
    MXHOST_MX_WGRAD=fp8 timeout 300 dist/mxhost bench --device cuda --shapes "$shapes" --reps "${REPS:-10}" \
        --warmup-ms "$WARMUP_MS" --peers "$out/peer_bench.csv" 2>&1 | grep -E "shape|wgrad|step"
fi
if [ -n "${PORTABLE_BENCH:-}" ]; then
    echo "== mxhost bench, portable build (MXHOST_MX_PORTABLE=${PORTABLE_ARCH:-1})"
    MXHOST_MX_PORTABLE=${PORTABLE_ARCH:-1} timeout 300 dist/mxhost bench --device cuda --shapes "$shapes" \
        --reps "${REPS:-10}" --warmup-ms "$WARMUP_MS" --peers "$out/peer_bench.csv" 2>&1
fi
echo "== mxhost bench, plugin bf16 (cuBLAS, in process)"
timeout 150 dist/mxhost bench --device cuda --plugin bf16 --shapes "$shapes" --reps "${REPS:-10}" --warmup-ms "$WARMUP_MS" \
    --peers "$out/peer_bench.csv" 2>&1
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
