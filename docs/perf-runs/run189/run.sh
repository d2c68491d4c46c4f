#!/usr/bin/env bash
# Run 189 (docs/perf.md): the weight's pair kernel with both shifts' fast paths branch-free and
# the exact route and counts only for words that need them (dist/, new) against the build before
# it (dist/old/: the plugin at 262def9~1), on a, b and c: the GroupedLinear step with its trace,
# two interleaved rounds, side by side with torch BF16; the selftest under `always` first (VERIFY,
# poisoned outputs); then ncu on c's pair kernel, old and new, at the card's clocks and at base.
set -u
PARTS_DEFAULT="ab ncu" source docs/perf-runs/prelude.sh run189
if has ab; then
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=always SHAPES="${SHAPES:-a,b,c}" PEER_BUDGET_S=60 ROUNDS=2 MODE=auto \
  VARIANTS="${VARIANTS:-old new}" ONLY="GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 420 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
ab_report $?
pack
fi
if has ncu; then
for v in old new; do
  for cc in none base; do
    f="$OUT/ncu-$v-$cc.txt"
    if [ $v = old ]; then export MXHOST_PLUGIN_PATH=dist/old; else unset MXHOST_PLUGIN_PATH; fi
    timeout 60 ncu --clock-control $cc --kernel-name "regex:mx_quantize_pair_bf16_noq" --launch-count 2 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread \
      dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$f" 2>&1
    echo "== $v, clocks $cc: rc=$?"; grep -E "gpu__time|inst_executed|dram__|registers" "$f" | awk '{printf "%s %s | ", $1, $NF} END {print ""}'
  done
done
unset MXHOST_PLUGIN_PATH
pack
fi
