#!/usr/bin/env bash
# Run 156 (docs/perf.md): is guest-sdk GroupedLinear's transposed-copy weight under `on` slower on
# small GEMMs? Run 155's toy-moe --blocks-2d took 58 s under `on` against 32 s on the default
# path, with the GEMM trace on (which reads the gate's status words back). Here without the
# trace, 12 steps: toy-moe built with the SDK before the change (dist/old/toy-moe.wasm: W's
# values kept under `on` too) and after it, under `on`, and the new one on the default path,
# two rounds; then the bench's step rows on toy-moe-sized custom shapes under both modes (the
# GroupedLinear row, and the default step row written as the old recipe). ~250 s.
set -u
dev_out="${OUT:-}"
export OUT=out/run156
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$OUT/card.txt"
for r in 1 2; do
    for v in old-on new-on new-off; do
        w=dist/toy-moe.wasm; [ "${v%%-*}" = old ] && w=dist/old/toy-moe.wasm
        MXHOST_MX_CHAIN=${v#*-} timeout 150 dist/mxhost run $w --device cuda -- --blocks-2d --steps 12 \
            >"$OUT/toy-$r-$v.txt" 2>&1
        echo "round $r $v: rc=$? $(grep -h 'time:' "$OUT/toy-$r-$v.txt")"
    done
done
for m in off on; do
    for k in 0 1; do
        MXHOST_MX_CHAIN=$m MXHOST_BENCH_STEP_WGRAD_VALUES=1 MXHOST_BENCH_STEP_KEEP_W=$k timeout 120 \
            dist/mxhost bench --device cuda --shapes "" --shape 8:512:256:1024 --shape 8:512:512:256 \
            --shape 32:1024:1024:1024 --reps 20 --warmup-ms 200 \
            --only "step: 3 GEMMs + all quantization (bf16,step as GroupedLinear with 32x32" >"$OUT/bench-$m-keep$k.txt" 2>&1
        echo "== bench $m, default step row with KEEP_W=$k: rc=$?"
        grep -E "^custom" "$OUT/bench-$m-keep$k.txt" | cut -c1-140
    done
done
if [ -n "$dev_out" ]; then tar czf "$dev_out/run156.tgz" -C "$OUT" .; fi
