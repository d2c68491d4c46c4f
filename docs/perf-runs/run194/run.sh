#!/usr/bin/env bash
# Run 194 (docs/perf.md): the X/dY form kernels' NOQ builds without their row-major s2 stores
# (mx_plain_from_form reads the stage scales from sat instead) and, with plugin ABI 1.8, without
# the MX tensor's row-major scales either (written transposed into the annex, written back on
# demand), new by default; against the same dist with MXHOST_MX_CHAIN_NOQ_S=0 (scales written at
# once) and with that and `-DMXQB_NOQ_S2=1` (s2 written too: as before run 194). First the
# selftest without VERIFY (which would turn the NOQ builds off), poisoned outputs, with nothing
# set and under `always`, so the bytes and scales left out are written back where the checks read
# them; then the GroupedLinear step with its trace on c, b, a (interleaved), side by side with
# torch BF16; then ncu on c's form kernel, the three builds.
set -u
PARTS_DEFAULT="selftest ab ncu" source docs/perf-runs/prelude.sh run194
if has selftest; then
selftest_modes auto always
pack
fi
if has ab; then
step_ab 1 330 "new new+MXHOST_MX_CHAIN_NOQ_S=0 new+MXHOST_MX_CHAIN_NOQ_S=0+MXHOST_NVRTC_DEFINES=-DMXQB_NOQ_S2=1"
pack
fi
if has ncu; then
for build in new noq_s0 noq_s0_s2; do
  f="$OUT/ncu-form-$build.txt"
  noq_s=1; [ $build != new ] && noq_s=0
  defs=""; [ $build = noq_s0_s2 ] && defs="-DMXQB_NOQ_S2=1"
  MXHOST_MX_CHAIN_NOQ_S=$noq_s MXHOST_NVRTC_DEFINES="$defs" timeout 60 ncu --clock-control none --kernel-name "regex:mx_quantize_rows_form_wv_noq" --launch-count 2 \
    --metrics gpu__time_duration.sum,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_write.sum,launch__registers_per_thread \
    dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$f" 2>&1
  echo "== $build: rc=$?"; grep -E "gpu__time|inst_executed|dram__|lts__|registers" "$f" | awk '{printf "%s %s | ", $1, $NF} END {print ""}'
done
pack
fi
