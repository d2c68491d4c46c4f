#!/usr/bin/env bash
# Run 174 (docs/perf.md): cache hints on the X/dY one-pass quantizer, timed kernel by kernel.
# (1) ncu durations of the form and pair kernels in b's GroupedLinear step, with the kernels
#     built as they ship and with MXHOST_NVRTC_DEFINES=-DMXQB_STCS (written-once outputs
#     stored evict-first; -DMXQB_LDCS, the input loaded so, is left for another call: the
#     device time left was short), each its own kernel cache (the defines enter the key);
# (2) one launch of the default build's form_wv_noq on b's dY with ncu's SpeedOfLight, memory
#     workload and warp-state sections: where it loses against copy bandwidth.
set -u
dev_out="${OUT:-}"
export OUT=out/run174
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run174.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
row="GroupedLinear with 32x32"
# (2) first: the detail, on the build as it ships (its first bench run compiles the kernels)
timeout 120 dist/mxhost bench --device cuda --shapes b --reps 1 --warmup-ms 0 --only "$row" > /dev/null 2>&1
timeout 150 ncu --clock-control none --cache-control none --kernel-name "regex:form_wv_noq" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    dist/mxhost bench --device cuda --shapes b --reps 1 --warmup-ms 0 --only "$row" > "$OUT/ncu-detail.txt" 2>&1
echo "== detail: rc=$?"
grep -E "Duration|Throughput|Memory \[%\]|DRAM|L2 |L1/TEX|Stall|Achieved Occupancy|Warp Cycles|Registers|Mem Busy|Max Bandwidth|Issue Slots" "$OUT/ncu-detail.txt" | head -40
pack
for v in none -DMXQB_STCS; do
    lab=$(printf %s "$v" | tr -c 'A-Za-z0-9' '_')
    if [ "$v" = none ]; then unset MXHOST_NVRTC_DEFINES; else export MXHOST_NVRTC_DEFINES="$v"; fi
    # (a first run compiles this build's kernels outside ncu)
    timeout 120 dist/mxhost bench --device cuda --shapes b --reps 1 --warmup-ms 0 --only "$row" > /dev/null 2>&1
    timeout 120 ncu --clock-control none --cache-control none --kernel-name "regex:form|pair" --launch-count 8 \
        --metrics gpu__time_duration.sum dist/mxhost bench --device cuda --shapes b --reps 1 --warmup-ms 0 \
        --only "$row" > "$OUT/ncu-$lab.txt" 2>&1
    echo "== $v: rc=$?"
    awk '/^  mx_/{k=$1" "$2} /gpu__time_duration.sum/{print "  " k, $NF}' "$OUT/ncu-$lab.txt"
done
unset MXHOST_NVRTC_DEFINES
pack
