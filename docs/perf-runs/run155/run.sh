#!/usr/bin/env bash
# Run 155 (docs/perf.md): guest-sdk's GroupedLinear with 32×32 weights under `on`, where
# mxfp8 now reports "chained-gemm" and the layer quantizes its weight with the transposed copy
# instead of its values. 1. toy-moe --blocks-2d on the default path and under `on` (with the
# GEMM trace: which kernels its forward and dgrad ran); 2. the bench's GroupedLinear row and the
# step with wgrad values (W + Wᵀ), default path and `on` interleaved, three rounds, a, b, c.
# From the repository root with dist/ built by scripts/dist.sh (carry ["dist"]), ~300 s; one
# tarball back in $OUT.
set -u
dev_out="${OUT:-}"
export OUT=out/run155
mkdir -p "$OUT"
dist/mxhost plugins | tee "$OUT/plugins-default.txt" | grep mxfp8
MXHOST_MX_CHAIN=on dist/mxhost plugins | tee "$OUT/plugins-on.txt" | grep mxfp8
for m in off on; do
    MXHOST_MX_CHAIN=$m MXHOST_MX_GEMM_TRACE=1 timeout 150 dist/mxhost run dist/toy-moe.wasm --device cuda \
        -- --blocks-2d >"$OUT/toy-$m.txt" 2>&1
    echo "toy-moe --blocks-2d ($m): rc=$?"; grep -v "mxhost-plugin-mxfp8" "$OUT/toy-$m.txt" | tail -3
    echo "  GEMM trace lines: $(grep -c 'GEMM ' "$OUT/toy-$m.txt"), chained: $(grep -c 'chained;' "$OUT/toy-$m.txt"), not taken: $(grep -c 'not taken' "$OUT/toy-$m.txt"), cuBLAS/bf16: $(grep -ci 'cublas\|bf16 path\|dequantize' "$OUT/toy-$m.txt")"
    grep "mxhost-plugin-mxfp8: GEMM" "$OUT/toy-$m.txt" | sed 's/(M [^)]*//' | sort | uniq -c | sort -rn | head -6
done
SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=100 ROUNDS=3 MODE=on VARIANTS="new+MXHOST_MX_CHAIN=off new" \
    ONLY="X and dY with wgrad values,step as GroupedLinear with 32x32" \
    bash scripts/gpu-ab.sh
if [ -n "$dev_out" ]; then tar czf "$dev_out/run155.tgz" -C "$OUT" .; fi
