#!/usr/bin/env bash
# Run 152 (docs/perf.md): ncu's full set for one launch of each wgrad-values kernel on c
# (mx_quantize_rows_wv_bf16_e4m3 on the default path, mx_quantize_rows_form_wv_e4m3 under
# `on`), from the bench row "quantize X 1x32 + wgrad values". From the repository root with
# dist/ (carry ["dist"]), ~100 s; ncu-<mode>.txt in $OUT.
set -u
out="${OUT:-out/run152}"; mkdir -p "$out"
for m in off on; do
    MXHOST_MX_CHAIN=$m timeout 150 ncu --set full --kernel-name "regex:mx_quantize_rows_(wv|form_wv)" \
        --launch-count 1 dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 \
        --only "quantize X 1x32 + wgrad" >"$out/ncu-$m.txt" 2>&1
    echo "== $m: rc=$?"
    grep -E "mx_quantize_rows|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Theoretical Occupancy" "$out/ncu-$m.txt" | head -14
done
