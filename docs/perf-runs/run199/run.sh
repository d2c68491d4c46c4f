#!/usr/bin/env bash
# Run 199 (docs/perf.md): the host's fix of the partner's lifetime (380c72a: a transposing
# quantize's result keeps its partner's annex alive, not only its data) and `at` where read on
# by default. The selftest (poisoned outputs, no VERIFY) with nothing set, under `always`, and
# under `always` with MXHOST_MX_CHAIN_AT_NEED=0: run 198's failing case (dgrad on a `Kn` weight
# quantized before A, A residual-carried, under `always`) passes in each.
set -u
PARTS_DEFAULT="selftest trace" source docs/perf-runs/prelude.sh run199
if has selftest; then
selftest_modes auto always
MXHOST_MX_CHAIN_AT_NEED=0 SELFTEST_TAG=at-whole selftest_modes always
pack
fi
# Part `trace` (~60 s): c's GroupedLinear step with every mxfp8 kernel timed in the step
# (MXHOST_MX_KERNEL_TRACE): where the ~75 µs between a chained GEMM's ncu time (638 µs) and its
# call in the step's trace (710–724 µs) go, and W's ~40–70 µs above its kernels.
if has trace; then
bash scripts/gpu-peers.sh "$OUT/peers" c 40
MXHOST_MX_KERNEL_TRACE="$OUT/kernels-c.tsv" MXHOST_BENCH_STEP_TRACE=1 MXHOST_MX_CHAIN=auto timeout 200 dist/mxhost bench \
    --device cuda --shapes c --only "GroupedLinear with 32x32" --peers "$OUT/peers/peer_bench.csv" > "$OUT/trace-c.txt" 2>&1
echo "trace rc=$?"; grep -o "step trace \[.*" "$OUT/trace-c.txt" | cut -c1-240
column -t -s $'\t' "$OUT/kernels-c.tsv" | head -30
pack
fi
