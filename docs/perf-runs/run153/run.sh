#!/usr/bin/env bash
# Run 153 (docs/perf.md): the default path's fused quantizer with its scale bytes staged in
# shared memory (mx_quantize_rows_wv_bf16_*, new) against 541ffca's (old, dist/old/): the
# selftest on the default path, then "quantize X 1x32 + wgrad values" and the step with X and
# dY quantized with their wgrad values (MXHOST_BENCH_STEP_WGRAD_VALUES=1, the default step row)
# on a, b, c, old and new interleaved, three rounds; ncu of the kernel on c with its L2 and DRAM
# throughput. From the repository root with dist/ built by scripts/dist.sh and 541ffca's plugin
# in dist/old/ (carry ["dist"]), ~300 s; one tarball back in $OUT.
set -u
dev_out="${OUT:-}"
export OUT=out/run153
export MXHOST_BENCH_STEP_WGRAD_VALUES=1
SELFTEST=default SHAPES=a,b,c PEER_BUDGET_S=100 ROUNDS=3 MODE=off VARIANTS="old new" \
    ONLY="quantize X 1x32 + wgrad,step: 3 GEMMs + all quantization (bf16" \
    NCU="mx_quantize_rows_wv" NCU_COUNT=2 NCU_ONLY="quantize X 1x32 + wgrad" \
    NCU_METRICS="lts__t_sectors.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed" \
    bash scripts/gpu-ab.sh
if [ -n "$dev_out" ]; then tar czf "$dev_out/run153.tgz" -C "$OUT" .; fi
