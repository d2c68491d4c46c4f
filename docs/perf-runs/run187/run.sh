#!/usr/bin/env bash
# Run 187 (docs/perf.md): where c's two quantizer kernels (the X/dY form kernel and the
# weight's pair kernel) are bound. Run 186 on an H100 read DRAM 73 / 78 % and "L2 Cache
# Throughput" 76 / 77 %; run 184 found them no faster on an H200 (43 % more DRAM bandwidth).
# This takes ncu's breakdown of the L2 and DRAM throughput figures (which L2 sub-unit is at
# its peak), the L2 sectors and requests by operation, the warp states, and the step trace
# of b and c on whatever card comes (an H200 answers run 184's question, either answers L2).
set -u
dev_out="${OUT:-/tmp}"
mkdir -p "$dev_out"
nvidia-smi --query-gpu=name,clocks.max.mem,memory.total --format=csv,noheader > "$dev_out/card.txt"
cat "$dev_out/card.txt"
K="regex:mx_quantize_pair_bf16_noq|mx_quantize_rows_form_wv_noq"
B=(dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32")
# 1. sections (always valid)
timeout 150 ncu --clock-control none --kernel-name "$K" --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --section WarpStateStats --section SchedulerStats --section Occupancy \
  "${B[@]}" > "$dev_out/ncu-sections.txt" 2>&1
echo "sections rc=$?"
# 2. breakdowns and counters (a bad metric name fails only this part)
timeout 150 ncu --clock-control none --kernel-name "$K" --launch-count 2 \
  --metrics breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed,breakdown:dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_requests_srcunit_tex_op_write.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
  "${B[@]}" > "$dev_out/ncu-breakdown.txt" 2>&1
echo "breakdown rc=$?"
grep -E "^  [a-z_0-9]+ \(|Duration|Throughput|lts__|dram__|l1tex__|smsp__inst|gpu__time" "$dev_out/ncu-breakdown.txt" | head -120
# 3. clock sensitivity: the same kernels with ncu's clocks locked to base (the step runs at
# the power cap, ~1.5-1.8 GHz, where ncu above ran them at ~1.95)
timeout 120 ncu --clock-control base --kernel-name "$K" --launch-count 2 \
  --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__throughput.avg.pct_of_peak_sustained_elapsed \
  "${B[@]}" > "$dev_out/ncu-base.txt" 2>&1
echo "base clocks rc=$?"; grep -E "^  [a-z_0-9]+ \(|gpu__time|sm__cycles|dram__" "$dev_out/ncu-base.txt" | head
# 4. the step traces, sustained (no peers), with the SM clock and power sampled
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw --format=csv -lms 100 > "$dev_out/clocks.csv" 2>&1 &
smi=$!
MXHOST_BENCH_STEP_TRACE=1 timeout 120 dist/mxhost bench --device cuda --shapes b,c --only "GroupedLinear with 32x32" > "$dev_out/trace.txt" 2>&1
echo "trace rc=$?"; grep -o "step trace \[.*" "$dev_out/trace.txt" | sed 's/GPU µs (host enqueue µs) //' | cut -c1-240
kill $smi 2>/dev/null; awk -F, 'NR>1{print $2}' "$dev_out/clocks.csv" | sort | uniq -c | sort -rn | head -8
