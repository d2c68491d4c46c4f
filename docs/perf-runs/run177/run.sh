#!/usr/bin/env bash
# Run 177 (docs/perf.md): run 176 again after its fix (the NOQ pair kernel was missing from the
# module's kernel list, so every weight pair call with bytes on demand failed), cut to the
# device time left: the selftest under `on` with the weight's bytes on demand (opt-in since,
# MXHOST_MX_CHAIN_NOQ_W=1; poisoned outputs, GEMM trace), then b's and c's GroupedLinear step
# with them against without (the default), one round, with the step trace.
set -u
dev_out="${OUT:-}"
export OUT=out/run177
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run177.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
MXHOST_MX_CHAIN_NOQ_W=1 MXHOST_MX_CHAIN=on MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 150 dist/mxhost selftest --device cuda --quick > "$OUT/selftest-on.txt" 2>&1
echo "selftest on rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest-on.txt"; grep -E "FAIL" "$OUT/selftest-on.txt" | head -5
echo "chained computed: $(grep -c 'chained GEMM computed' "$OUT/selftest-on.txt"), per-k32 after a closed gate: $(grep -c 'per-k32 kernel computed' "$OUT/selftest-on.txt")"
pack
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=0 SHAPES=b,c PEER_BUDGET_S=75 ROUNDS=1 MODE=auto VARIANTS="new+MXHOST_MX_CHAIN_NOQ_W=1 new" \
  ONLY="GroupedLinear with 32x32" OUT="$OUT/ab" timeout 200 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; cat "$OUT/ab/summary.txt" 2>/dev/null | head -20
grep -h "step trace \[. step as GroupedLinear\]" "$OUT"/ab/ab-*.txt 2>/dev/null | cut -c1-300
pack
