#!/usr/bin/env bash
# Run 176 (docs/perf.md): the weight's MX bytes on demand (mx_quantize_pair_bf16_noq_e4m3, the
# chained GEMM's corrections reading the partner's form where it equals its bytes: MXC_BT_FORM).
# (1) the selftest with nothing set and under `on` (poisoned outputs, GEMM trace);
# (2) the step rows, both bytes on demand (new) against the weight's written whole
#     (MXHOST_MX_CHAIN_NOQ_W=0), interleaved, two rounds, a, b, c, with the step trace;
# (3) ncu durations of the pair kernel and the write-backs in b's GroupedLinear step;
# (4) hello-gemm (last: the device time left was short).
set -u
dev_out="${OUT:-}"
export OUT=out/run176
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run176.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
for m in auto on; do
    MXHOST_MX_CHAIN=$m MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 200 dist/mxhost selftest --device cuda --quick > "$OUT/selftest-$m.txt" 2>&1
    echo "selftest $m rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest-$m.txt"; grep -E "FAIL" "$OUT/selftest-$m.txt" | head -5
    echo "chained computed: $(grep -c 'chained GEMM computed' "$OUT/selftest-$m.txt"), per-k32 after a closed gate: $(grep -c 'per-k32 kernel computed' "$OUT/selftest-$m.txt")"
done
unset MXHOST_MX_CHAIN
pack
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=80 ROUNDS=2 MODE=auto VARIANTS="new new+MXHOST_MX_CHAIN_NOQ_W=0" \
  ONLY="step: 3,GroupedLinear with 32x32" \
  NCU='pair|plain_from' NCU_SHAPE=b NCU_ONLY="GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 330 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; cat "$OUT/ab/summary.txt" 2>/dev/null | head -70
grep -h "step trace \[step as GroupedLinear\]" "$OUT"/ab/ab-*.txt 2>/dev/null | cut -c1-300
pack
MXHOST_MX_GEMM_TRACE=1 timeout 120 dist/mxhost run dist/hello-gemm.wasm --device cuda > "$OUT/hello-gemm.txt" 2>&1
echo "hello-gemm rc=$?"; grep -E "for a GEMM|SNR gates|gate (open|closed)" "$OUT/hello-gemm.txt" | cut -c1-160 | head -12
pack
