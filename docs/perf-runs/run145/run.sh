#!/usr/bin/env bash
# Run 145 (docs/perf.md): where the one-launch weight quantizer (mx_quantize_pair_bf16_e4m3,
# 649 µs on c, 2.45 TB/s: the largest quantize launch of c's `on` step) and the X/dY form
# kernel (192 µs, 2.46 TB/s) lose against the tile quantizer (t32l, 2.92 TB/s): ncu's full
# set (occupancy, warp stalls, issue slots, memory) and per-instruction SASS stalls, one
# launch of each on shape c. From the repository root with dist/ built (carry ["dist"]),
# ~120 s. Output under $OUT (or out/run145).
set -u
out="${OUT:-out/run145}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$out/card.txt"
prof() {   # tag, kernel regex, mode, extra env...
    local tag=$1 re=$2 mode=$3; shift 3
    env MXHOST_MX_CHAIN=$mode "$@" timeout 200 ncu --set full --import-source no \
        --kernel-name "regex:$re" --launch-count 1 -f -o "$out/$tag" \
        dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "step: 3" \
        >"$out/$tag.log" 2>&1
    echo "$tag: ncu rc=$?"
    ncu -i "$out/$tag.ncu-rep" --page details >"$out/$tag-details.txt" 2>&1
    ncu -i "$out/$tag.ncu-rep" --page source --csv --print-source sass >"$out/$tag-sass.csv" 2>&1
    grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Memory Throughput|DRAM Throughput|Stall|L1/TEX Hit|Mem Busy|Max Bandwidth" \
        "$out/$tag-details.txt" | head -40
    gzip -f "$out/$tag-sass.csv"
    rm -f "$out/$tag.ncu-rep"
}
prof pair "mx_quantize_pair" on
prof form "mx_quantize_rows_form" on
prof t32l "mx_quantize_t32l" off
