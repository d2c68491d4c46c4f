#!/usr/bin/env bash
# What the L2 throughput of the quantize kernels is made of (ncu, one step of shape SHAPE, default
# c, under MXHOST_MX_CHAIN=on), on the GPU machine from the repository root with dist/ built:
# the form and pair kernels are L2-bound at 3.1-3.2 TB/s where the fake and tile quantizers move
# 3.8-4.1 (docs/perf.md runs 136-137). Per kernel: the lts__throughput breakdown (which L2
# sub-unit is the limit), DRAM, L2 requests and sectors by read/write, and the sectors that
# cross the L2 fabric (the far partition). KERNELS overrides the regex; extra environment (e.g.
# MXHOST_MX_CHAIN_QPAIR=0) passes through. Output: $OUT/ncu-l2.txt (or out/ncu-l2).
set -u
out="${OUT:-out/ncu-l2}"
mkdir -p "$out"
kernels="${KERNELS:-mx_quantize_rows_form|mx_reencode_pair|mx_quantize_pair|mx_fakequant|mx_quantize_t32l}"
MXHOST_MX_CHAIN=on timeout 240 ncu --clock-control none --cache-control none \
  --kernel-name "regex:$kernels" --launch-count "${COUNT:-6}" \
  --metrics breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed,breakdown:dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_ltcfabric.sum \
  dist/mxhost bench --device cuda --shapes "${SHAPE:-c}" --reps 1 --warmup-ms 0 --only "step: 3" > "$out/ncu-l2.txt" 2>&1
echo "ncu rc=$?"
# kernel names, then every metric above 10 (percentages) and all counts and durations
grep -E "^  mx_|lts__|dram__|duration" "$out/ncu-l2.txt" |
  awk '/^  mx_/ {print; next} {v=$NF; gsub(",","",v); if (v+0 > 10 || /duration|bytes|requests|sectors/) print}' | head -200
