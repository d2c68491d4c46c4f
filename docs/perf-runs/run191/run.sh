#!/usr/bin/env bash
# Run 191 (docs/perf.md; written for the next session's device time): the X/dY form kernel with
# wgrad values at 4 CTAs per SM (-DMXQBF_WV_CTAS=4: at most 64 registers, ptxas spills 36 bytes
# stored / 288 loaded) against the default (79 registers, 3 CTAs per SM), on a, b and c: the
# GroupedLinear step with its trace, two interleaved rounds, side by side with torch BF16; the
# selftest under `always` with the define first (VERIFY, poisoned outputs); then ncu on c's
# form kernel, both builds. Run 187 found this kernel bound by memory latency (3 % slower at base
# clocks, 5.8 warps per scheduler, 1.0 eligible).
set -u
PARTS_DEFAULT="ab chain ncu" source docs/perf-runs/prelude.sh run191
D=-DMXQBF_WV_CTAS=4
if has ab; then
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=always SELFTEST_ENV="MXHOST_NVRTC_DEFINES=$D" SHAPES="${SHAPES:-a,b,c}" PEER_BUDGET_S=90 \
  ROUNDS="${ROUNDS:-2}" MODE=auto VARIANTS="new new+MXHOST_NVRTC_DEFINES=$D" ONLY="GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 480 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
ab_report $?
pack
fi
if has chain; then
# The opt-in chained wgrad's selftest failure (run 188): how far apart the two routes are.
MXHOST_MX_CHAIN_WGRAD=1 MXHOST_MX_CHAIN=always MXHOST_POISON_OUTPUTS=1 timeout 120 dist/mxhost selftest --device cuda --shapes "" \
  > "$OUT/chain-wgrad-selftest.txt" 2>&1
echo "chain rc=$?"; grep -iE "wgrad values|FAIL|passed" "$OUT/chain-wgrad-selftest.txt" | cut -c1-220 | head -12
pack
fi
if has ncu; then
for d in "" "$D"; do
  f="$OUT/ncu-form$(echo "$d" | tr -c 'A-Za-z0-9' _).txt"
  MXHOST_NVRTC_DEFINES="$d" timeout 60 ncu --clock-control none --kernel-name "regex:mx_quantize_rows_form_wv_noq" --launch-count 2 \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.per_cycle_active \
    dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$f" 2>&1
  echo "== [$d] rc=$?"; grep -E "gpu__time|inst_executed|dram__|registers|warps_active" "$f" | awk '{printf "%s %s | ", $1, $NF} END {print ""}'
done
pack
fi
