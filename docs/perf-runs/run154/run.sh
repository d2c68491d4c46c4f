#!/usr/bin/env bash
# Run 154 (docs/perf.md): the training step written three ways, timed in the same row position
# (the default step row): plain; X and dY with their wgrad values (MXHOST_BENCH_STEP_WGRAD_VALUES=1);
# guest-sdk GroupedLinear's recipe on a GPU (that, and the weight quantized with its values kept,
# MXHOST_BENCH_STEP_KEEP_W=1), each on the default path and under `on`: six variants interleaved,
# three rounds, a, b, c. From the repository root with dist/ built by scripts/dist.sh (carry
# ["dist"]), ~400 s; one tarball back in $OUT.
set -u
dev_out="${OUT:-}"
export OUT=out/run154
V=MXHOST_BENCH_STEP_WGRAD_VALUES=1; K=MXHOST_BENCH_STEP_KEEP_W=1; OFF=MXHOST_MX_CHAIN=off
SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=100 ROUNDS=3 MODE=on \
    VARIANTS="new+$OFF new+$OFF+$V new+$OFF+$V+$K new new+$V new+$V+$K" \
    ONLY="step: 3 GEMMs + all quantization (bf16" \
    bash scripts/gpu-ab.sh
if [ -n "$dev_out" ]; then tar czf "$dev_out/run154.tgz" -C "$OUT" .; fi
