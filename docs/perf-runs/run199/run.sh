#!/usr/bin/env bash
# Run 199 (docs/perf.md): the host's fix of the partner's lifetime (380c72a: a transposing
# quantize's result keeps its partner's annex alive, not only its data) and `at` where read on
# by default. The selftest (poisoned outputs, no VERIFY) with nothing set, under `always`, and
# under `always` with MXHOST_MX_CHAIN_AT_NEED=0: run 198's failing case (dgrad on a `Kn` weight
# quantized before A, A residual-carried, under `always`) passes in each; and with nothing set
# but MXHOST_PINNED_UPLOADS=1 (the pinned upload ring, every small copy through it). Part
# `selftest` takes ~360 s, parts `trace` and `pinned` ~450 s: two calls on one warm machine,
# `PARTS=selftest`, then `PARTS="trace pinned"` (trim with SHAPES, ROUNDS, AB_TIMEOUT_S).
set -u
PARTS_DEFAULT="selftest trace pinned" source docs/perf-runs/prelude.sh run199
if has selftest; then
selftest_modes auto always
MXHOST_MX_CHAIN_AT_NEED=0 SELFTEST_TAG=at-whole selftest_modes always
MXHOST_PINNED_UPLOADS=1 SELFTEST_TAG=pinned selftest_modes auto
pack
fi
# Part `trace` (~150 s): c's GroupedLinear step with every mxfp8 kernel timed in the step
# (MXHOST_MX_KERNEL_TRACE), with pageable uploads (the default) and through the pinned ring
# (MXHOST_PINNED_UPLOADS=1): where the ~75 µs between a chained GEMM's ncu time (638 µs) and its
# call in the step's trace (710–724 µs) go, W's ~40–70 µs above its kernels, and whether the
# calls' small pageable copies make the host wait on the GPU (the gaps at a call's start).
if has trace; then
bash scripts/gpu-peers.sh "$OUT/peers" c 40
for v in pageable pinned; do
    pin=0; [ "$v" = pinned ] && pin=1
    MXHOST_PINNED_UPLOADS=$pin MXHOST_MX_KERNEL_TRACE="$OUT/kernels-c-$v.tsv" MXHOST_BENCH_STEP_TRACE=1 MXHOST_MX_CHAIN=auto \
        timeout 200 dist/mxhost bench --device cuda --shapes c --only "GroupedLinear with 32x32" \
        --peers "$OUT/peers/peer_bench.csv" > "$OUT/trace-c-$v.txt" 2>&1
    echo "trace $v rc=$?"; grep -E "training step as GroupedLinear" "$OUT/trace-c-$v.txt" | cut -c1-160
    grep -o "step trace \[.*" "$OUT/trace-c-$v.txt" | cut -c1-240
    column -t -s $'\t' "$OUT/kernels-c-$v.tsv" | head -24
done
pack
fi
# Part `pinned` (~300 s): the step on c, b, a beside torch BF16, two interleaved rounds of
# pageable uploads (the default) and MXHOST_PINNED_UPLOADS=1, after a warm round.
if has pinned; then
WARM_ROUND=1 step_ab 2 420 "new new+MXHOST_PINNED_UPLOADS=1"
pack
fi
