#!/usr/bin/env bash
# Run 200 (docs/perf.md; ran at b826035, MXHOST_MX_PDL was taken out after it, dd9e6e0): programmatic dependent launches (MXHOST_MX_PDL=1) for the gated kernels
# behind a chained GEMM, and the kernel trace's entry/exit marks. One call of ~420 s:
#   selftest: auto with MXHOST_MX_PDL=1 (poisoned outputs; the gated per-k32 kernel, its tables
#     and the bytes written back run as dependent launches where the gate closes);
#   trace: c's GroupedLinear step with every mxfp8 kernel, memset, upload and call entry/exit
#     timed in the stream (MXHOST_MX_KERNEL_TRACE; PDL off, the events would serialize it):
#     where W's call's ~70 µs above its kernels go (run 199);
#   pdl: the step on SHAPES (c,b,a) beside torch BF16, two interleaved rounds of the default
#     and MXHOST_MX_PDL=1, after a warm round.
set -u
PARTS_DEFAULT="selftest trace pdl" source docs/perf-runs/prelude.sh run200
if has selftest; then
MXHOST_MX_PDL=1 SELFTEST_TAG=pdl selftest_modes auto
pack
fi
if has trace; then
bash scripts/gpu-peers.sh "$OUT/peers" c 40
MXHOST_MX_KERNEL_TRACE="$OUT/kernels-c.tsv" MXHOST_BENCH_STEP_TRACE=1 MXHOST_MX_CHAIN=auto \
    timeout 200 dist/mxhost bench --device cuda --shapes c --only "GroupedLinear with 32x32" \
    --peers "$OUT/peers/peer_bench.csv" > "$OUT/trace-c.txt" 2>&1
echo "trace rc=$?"; grep -E "training step as GroupedLinear" "$OUT/trace-c.txt" | cut -c1-160
grep -o "step trace \[.*" "$OUT/trace-c.txt" | cut -c1-260
cut -f1-7 "$OUT/kernels-c.tsv" | head -40
pack
fi
if has pdl; then
WARM_ROUND=1 step_ab 2 420 "new new+MXHOST_MX_PDL=1"
pack
fi
