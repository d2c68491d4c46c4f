#!/usr/bin/env bash
# Run 193 (docs/perf.md): what each output of the X/dY form kernel with wgrad values
# (mx_quantize_rows_form_wv_noq_*) costs on c, by knock-outs under ncu (-DMXQB_KO=bits through
# MXHOST_NVRTC_DEFINES: 1 no `at`, 2 no wgrad values, 4 no per-row scale bytes s/s2; the outputs
# left out are wrong, so this times the kernel only). One rep of c's GroupedLinear step per
# build, the kernel's two launches (X, dY) each: duration, DRAM bytes, L2 write requests and
# sectors, instructions. Last, `scoal`: -DMXQB_SCOAL=1 (the one-block builds' scale bytes gathered in
# shared memory and written 32 requests per CTA instead of 128; same outputs).
set -u
PARTS_DEFAULT="ko" source docs/perf-runs/prelude.sh run193
if has ko; then
for ko in 0 1 2 4 7 scoal; do
  f="$OUT/ncu-ko$ko.txt"
  defs="-DMXQB_KO=$ko"; [ "$ko" = scoal ] && defs="-DMXQB_SCOAL=1"
  MXHOST_NVRTC_DEFINES="$defs" timeout 90 ncu --clock-control none --kernel-name "regex:mx_quantize_rows_form_wv_noq" --launch-count 2 \
    --metrics gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.per_cycle_active,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_requests_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_write.sum,smsp__inst_executed.sum \
    dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$f" 2>&1
  echo "== KO=$ko rc=$?"; grep -E "gpu__time|registers|warps_active|dram__|lts__|inst_executed" "$f" | awk '{printf "%s %s | ", $1, $NF} END {print ""}'
done
pack
fi
