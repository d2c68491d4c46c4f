#!/usr/bin/env bash
# Run 197 (docs/perf.md): how evenly the chained forward and dgrad keep the SMs busy (the
# round model of "Narrow last tiles in the chained GEMM": on c 2944 tiles over 132 CTAs, 23
# rounds for 40 of them against a mean of 22.3), and what they read from DRAM. ncu on one
# GroupedLinear step per shape (c, a, b), the chained kernels' launches (each GEMM enqueues the
# 4-stage and the 3-stage build; the gate lets one run): duration, SM active cycles (mean, max,
# min over SMs), DRAM bytes read, L2 read sectors. MXHOST_MX_CHAIN_NARROW=0 only matters for a
# dist/ built at 06836ec (run 196's, with the narrow split); from 0a23717 on there is no split. Part `xdy`: every kernel of c's step under ncu (durations only), to
# say where X's quantize call spends the 30-60 µs it reads above dY's in the step traces of
# runs 194 and 196 (the same shape and kernel on c). Part `protocol`: the GroupedLinear step on
# c, b, a with each rep synchronized before the next (the default) against
# MXHOST_BENCH_QUEUED_REPS=1 (reps enqueued back to back, one synchronization: do_bench's loop,
# as bench_peers.py times torch), two interleaved rounds. Needs a dist/ built at 644c3fb or later (the
# variable is ignored before).
set -u
PARTS_DEFAULT="ncu xdy protocol" source docs/perf-runs/prelude.sh run197
if has ncu; then
for shape in ${SHAPES:-c a b}; do
  f="$OUT/ncu-$shape.txt"
  MXHOST_MX_CHAIN_NARROW=0 timeout 120 ncu --clock-control none --kernel-name "regex:mx_cgemm_" --launch-count 4 \
    --metrics gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,sm__cycles_elapsed.max,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum \
    dist/mxhost bench --device cuda --shapes $shape --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$f" 2>&1
  echo "== $shape rc=$?"
  grep -E "mx_cgemm_|gpu__time|sm__cycles|dram__bytes|lts__t" "$f" | awk '/mx_cgemm_/ {printf "\n%s ", $1; next} {printf "%s %s | ", $1, $NF} END {print ""}'
done
pack
fi
if has xdy; then
  f="$OUT/ncu-c-step.txt"
  MXHOST_MX_CHAIN_NARROW=0 timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum \
    dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$f" 2>&1
  echo "== c step kernels rc=$?"
  awk '/^  [a-z_0-9]+.*\(/ {k=$1} /gpu__time_duration.sum/ {printf "%s %s\n", k, $NF}' "$f" | tail -40
  pack
fi
if has protocol; then
# (SHAPES is the ncu part's, space-separated: this part takes SHAPES_AB)
SHAPES="${SHAPES_AB:-c,b,a}" WARM_ROUND=1 step_ab 2 330 "new new+MXHOST_BENCH_QUEUED_REPS=1"
pack
fi
