#!/usr/bin/env bash
# (Ran 2026-12-07, results in docs/perf.md; MXHOST_MX_CHAIN_TCB_MIN was taken out after it, a3533d7.)
# Run 184 (docs/perf.md): MXHOST_MX_CHAIN_TCB_MIN (a correction round with fewer B entries than
# this adds them on the CUDA cores instead of in a tensor-core slab; run 182 found one slab per
# tile at ~11 % of the consumers' time on b's forward) at 9 and 17 against the default (0: every
# round on the tensor cores), on b and c (forward, dgrad, GroupedLinear step with its trace), two
# interleaved rounds, side by side with torch BF16; first the selftest under `always` with
# TCB_MIN=17 (the CUDA-core path on the GPU), VERIFY and poisoned outputs; then ncu's source page
# of b's forward under TCB_MIN=17 (the tile end's share against run 182's); then ncu durations of
# every kernel of c's GroupedLinear step that the weight's call launches, and the first X/dY ones.
# To also compare with the plugin before the parameter existed (same kernels, without the
# branch): build 67b1dd6's plugin into dist/old/ and add "old" to VARIANTS.
set -u
dev_out="${OUT:-}"
export OUT=out/run184
mkdir -p "$OUT"
PARTS="${PARTS:-ab src weight}"  # run a subset over several device calls: PARTS=ab, PARTS="src weight"
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run184.tgz" -C "$OUT" .; fi; }
if has ab; then
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=always SELFTEST_ENV="MXHOST_MX_CHAIN_TCB_MIN=17" SHAPES=b,c PEER_BUDGET_S=60 ROUNDS=2 MODE=auto \
  VARIANTS="${VARIANTS:-new new+MXHOST_MX_CHAIN_TCB_MIN=9 new+MXHOST_MX_CHAIN_TCB_MIN=17}" \
  ONLY="forward X 1x32 · W 32x32 (pre-quantized),[E,K,N] (transposed copy),GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 450 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; tail -3 "$OUT/ab/selftest.txt" 2>/dev/null; cat "$OUT/ab/summary.txt" 2>/dev/null | head -40
for f in "$OUT"/ab/ab-*.txt; do echo "${f##*/}"; grep -o "step trace \[.*" "$f" | sed 's/GPU µs (host enqueue µs) //' | cut -c1-220; done
pack
fi
if has src; then
MXHOST_MX_CHAIN_TCB_MIN=17 timeout 120 ncu --clock-control none --kernel-name "regex:mx_cgemm_e4m3e4m3_w2d_bf16_s3" --launch-count 1 \
    --section WarpStateStats --section SourceCounters -o "$OUT/fwd" \
    dist/mxhost bench --device cuda --shapes b --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
ncu -i "$OUT/fwd.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip -9 > "$OUT/sass.csv.gz"
rm -f "$OUT/fwd.ncu-rep"
pack
fi
if has weight; then
# c's weight call: every kernel it launches (run 182 left ~55 µs of its in-step ~500 unattributed)
timeout 90 ncu --clock-control none --kernel-name "regex:mx_scales_to_f32|mx_quantize_pair|mx_chain_lists|mx_chain_status|mx_plain" --launch-count 12 \
    --section SpeedOfLight dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$OUT/ncu-c-w.txt" 2>&1
echo "ncu (c's weight call) rc=$?"; grep -E "^  [a-z_0-9]+ \(|Duration" "$OUT/ncu-c-w.txt" | head -30
pack
fi
