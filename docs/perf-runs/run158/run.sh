#!/usr/bin/env bash
# Run 158 (docs/perf.md): X and dY quantized with their wgrad values and their own values kept,
# in one pass (mx_quantize_rows_vals_wv_bf16_*), beside a weight with kept values: forward and
# dgrad then run cuBLAS on values alone, with no expansion of X's or dY's bytes in the call.
# 1. the default-path selftest with poisoned outputs (its wgrad-values cases alternate kept
# values); 2. the default step row written as GroupedLinear ran it before (W's values kept, X
# and dY with wgrad values) and with X's and dY's values kept too (MXHOST_BENCH_STEP_KEEP_X=1),
# interleaved, three rounds, a, b, c, with the GroupedLinear row (now the latter); 3. ncu of the
# quantizers and expansions in c's step. From the repository root with dist/ built by
# scripts/dist.sh (carry ["dist"]), ~400 s; one tarball back in $OUT.
set -u
dev_out="${OUT:-}"
export OUT=out/run158
K=MXHOST_BENCH_STEP_KEEP_W=1; V=MXHOST_BENCH_STEP_WGRAD_VALUES=1; X=MXHOST_BENCH_STEP_KEEP_X=1
SELFTEST=default SHAPES=a,b,c PEER_BUDGET_S=100 ROUNDS=3 MODE=off VARIANTS="new+$K+$V new+$K+$V+$X" \
    ONLY="step: 3 GEMMs + all quantization (bf16,step as GroupedLinear with 32x32" \
    NCU="mx_quantize_rows|mx_dequantize|mx_fakequant" NCU_COUNT=8 NCU_ONLY="step: 3 GEMMs + all quantization (bf16" \
    bash scripts/gpu-ab.sh
grep -E "wgrad values" "$OUT/selftest.txt" | head -12
if [ -n "$dev_out" ]; then tar czf "$dev_out/run158.tgz" -C "$OUT" .; fi
