#!/usr/bin/env bash
# Run 151 (docs/perf.md): run 150 again, a second sample (an H200 asked for): the training step with and without ABI 1.5's wgrad values, timed in
# the same row position (the default step row; MXHOST_BENCH_STEP_WGRAD_VALUES=1 makes it quantize
# X and dY with their values, which wgrad then reads), under `on` and on the default path,
# four variants interleaved, three rounds, a, b, c. Then ncu of the quantizers in c's
# "quantize X + wgrad values" row. From the repository root with dist/ built by scripts/dist.sh
# (carry ["dist"]), ~400 s; one tarball back in $OUT.
set -u
dev_out="${OUT:-}"
export OUT=out/run151
SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=100 ROUNDS=3 MODE=on \
    VARIANTS="new new+MXHOST_BENCH_STEP_WGRAD_VALUES=1 new+MXHOST_MX_CHAIN=off new+MXHOST_MX_CHAIN=off+MXHOST_BENCH_STEP_WGRAD_VALUES=1" \
    ONLY="step: 3 GEMMs + all quantization (bf16" \
    NCU="mx_quantize_rows|mx_fakequant" NCU_COUNT=4 NCU_ONLY="quantize X 1x32 + wgrad" \
    bash scripts/gpu-ab.sh
if [ -n "$dev_out" ]; then tar czf "$dev_out/run151.tgz" -C "$OUT" .; fi
