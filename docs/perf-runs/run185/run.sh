#!/usr/bin/env bash
# (Ran 2026-12-07, results in docs/perf.md; the persistent builds (d63ff62) and the -DMXCL_STATIC_ROWS build were taken out after it.)
# Run 185 (docs/perf.md): the persistent builds of the X/dY form kernel and of the weight's pair
# kernel (MXHOST_MX_FORM_PF / MXHOST_MX_PAIR_PF = CTAs per SM: each thread or warp copies its
# next 128 x 128 block into shared memory under the current one) at 3 and 2 CTAs per SM against
# the one-block builds, on a, b and c (GroupedLinear step with its trace: each quantize call's
# time), two interleaved rounds, side by side with torch BF16; first the selftest under `always`
# with both at 3 (VERIFY compares every region the fused quantizers write, poisoned outputs);
# then ncu's durations and DRAM throughput of both kernels on c, one-block against 3 CTAs per SM,
# and of the residual lists on b and c with their row queue against the old rows per warp.
# PARTS=ab or PARTS=ncu runs one part (several device calls).
set -u
PARTS_DEFAULT="ab ncu" source docs/perf-runs/prelude.sh run185
if has ab; then
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=always SELFTEST_ENV="MXHOST_MX_FORM_PF=3 MXHOST_MX_PAIR_PF=3" SHAPES="${SHAPES:-a,b,c}" PEER_BUDGET_S=60 ROUNDS=2 MODE=auto \
  VARIANTS="${VARIANTS:-new new+MXHOST_MX_FORM_PF=3+MXHOST_MX_PAIR_PF=3 new+MXHOST_MX_FORM_PF=2+MXHOST_MX_PAIR_PF=2}" \
  ONLY="GroupedLinear with 32x32" OUT="$OUT/ab" timeout 450 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
ab_report $?
pack
fi
if has ncu; then
for v in "MXHOST_MX_FORM_PF=0" "MXHOST_MX_FORM_PF=3 MXHOST_MX_PAIR_PF=3"; do
  echo "== ncu, $v"
  env $v timeout 60 ncu --clock-control none --kernel-name "regex:mx_quantize_rows_form_wv_noq|mx_quantize_pair_bf16_noq" --launch-count 3 \
      --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum.per_second,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size \
      dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$OUT/ncu-$(echo $v | tr -c 'A-Za-z0-9' _).txt" 2>&1
  echo "rc=$?"; grep -E "^  mx_|duration|dram__|lts__|sm__thr|registers|grid_size" "$OUT/ncu-$(echo $v | tr -c 'A-Za-z0-9' _).txt" | head -30
done
# the residual lists: the row queue (default) against rows w, w + 8, ... per warp (the old code)
for v in "MXHOST_NVRTC_DEFINES=-DMXCL_STATIC_ROWS" "MXHOST_NVRTC_DEFINES="; do
  for sh in b c; do
    f="$OUT/ncu-lists-$sh-$(echo $v | tr -c 'A-Za-z0-9' _).txt"
    env $v timeout 180 ncu --clock-control none --kernel-name "regex:mx_chain_lists" --launch-count 8 --metrics gpu__time_duration.sum,launch__grid_size \
        dist/mxhost bench --device cuda --shapes $sh --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$f" 2>&1
    echo "== lists, $sh, $v: rc=$?"; grep -E "grid_size|duration" "$f" | awk '{printf "%s ", $NF} END {print ""}'
  done
done
pack
fi
