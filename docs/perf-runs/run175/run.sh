#!/usr/bin/env bash
# Run 175 (docs/perf.md), one device call, each part packed into $OUT as it finishes:
# (1) the selftest under MXHOST_MX_CHAIN=on with poisoned outputs (chain_block::form_a's
#     residual counts now in the layout's mc region: not yet run on a GPU);
# (2) the training-step rows of a, b, c under MXHOST_BENCH_STEP_TRACE=1: per call, the GPU
#     time between stream marks and the host's enqueue time (where the 5-8 % between the ncu
#     kernel sum and the bench row goes);
# (3) run 174: ncu's detail of the X/dY quantizer, then its kernels with and without the
#     cache-hint macros.
set -u
dev_out="${OUT:-}"
export OUT=out/run175
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run175.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
MXHOST_MX_CHAIN=on MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 \
    timeout 200 dist/mxhost selftest --device cuda --quick > "$OUT/selftest-on.txt" 2>&1
echo "selftest on rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest-on.txt"; grep -E "FAIL" "$OUT/selftest-on.txt" | head -5
echo "chained computed: $(grep -c 'chained GEMM computed' "$OUT/selftest-on.txt"), per-k32 after a closed gate: $(grep -c 'per-k32 kernel computed' "$OUT/selftest-on.txt")"
pack
MXHOST_BENCH_STEP_TRACE=1 timeout 240 dist/mxhost bench --device cuda --shapes a,b,c --reps 10 \
    --only "training step" --json "$OUT/trace.json" > "$OUT/trace.txt" 2>&1
echo "trace rc=$?"; grep -E "step trace|training step" "$OUT/trace.txt" | cut -c1-400
pack
mkdir -p "$OUT/run174"; OUT="$OUT/run174" bash docs/perf-runs/run174/run.sh
pack
