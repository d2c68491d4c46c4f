#!/usr/bin/env bash
# Run 190 (docs/perf.md): the X/dY form kernel with the shift's fast path branch-free and the
# exact route, counts and NOQ shuffles only where needed (dist/, new) against the build before it
# (dist/old/: the plugin at 9b3c9a8~1, with run 189's pair kernel), on a, b and c: the
# GroupedLinear step with its trace, one round each (device time), side by side with torch BF16;
# the selftest under `always` first (VERIFY, poisoned outputs); then ncu on c's form kernel.
set -u
PARTS_DEFAULT="ab ncu" source docs/perf-runs/prelude.sh run190
if has ab; then
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=always SHAPES="${SHAPES:-a,b,c}" PEER_BUDGET_S=60 ROUNDS=1 MODE=auto \
  VARIANTS="${VARIANTS:-old new}" ONLY="GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 420 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
ab_report $?
pack
fi
if has ncu; then
for v in old new; do
  for cc in none; do
    f="$OUT/ncu-$v-$cc.txt"
    if [ $v = old ]; then export MXHOST_PLUGIN_PATH=dist/old; else unset MXHOST_PLUGIN_PATH; fi
    timeout 60 ncu --clock-control $cc --kernel-name "regex:mx_quantize_rows_form_wv_noq" --launch-count 2 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread \
      dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$f" 2>&1
    echo "== $v, clocks $cc: rc=$?"; grep -E "gpu__time|inst_executed|dram__|registers" "$f" | awk '{printf "%s %s | ", $1, $NF} END {print ""}'
  done
done
unset MXHOST_PLUGIN_PATH
pack
fi
