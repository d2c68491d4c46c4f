#!/usr/bin/env bash
# A timeline of `mxhost bench` on one shape under Nsight Systems, from the repository root with
# dist/ built by scripts/dist.sh; outputs under $OUT (or out/gpu-nsys): the bench's own table,
# the per-kernel summary and the GPU trace (CSV) that scripts/nsys-gaps.py reads to attribute a
# quantize call's time to its kernels and the gaps between them (docs/perf.md run 123).
# Without nsys on the machine it says so and falls back to ncu with caches and clocks left as
# the stream leaves them (NCU=regex picks the kernels).
set -u
out="${OUT:-out/gpu-nsys}"
mkdir -p "$out"
nsys_bin=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys \
    /usr/local/cuda*/nsight-systems*/bin/nsys 2>/dev/null | head -1)
if [ -n "$nsys_bin" ]; then
    echo "== nsys: $nsys_bin"
    MXHOST_MX_CHAIN="${MODE:-on}" timeout 300 "$nsys_bin" profile -o "$out/prof" --trace=cuda --force-overwrite true \
        dist/mxhost bench --device cuda --shapes "${SHAPES:-a}" --reps "${REPS:-3}" --warmup-ms 0 >"$out/bench.txt" 2>&1
    echo "rc=$?"
    "$nsys_bin" stats --report cuda_gpu_kern_sum,cuda_gpu_trace --format csv -o "$out/stats" "$out/prof.nsys-rep" \
        >"$out/stats.log" 2>&1
    echo "stats rc=$?"; ls "$out"
else
    echo "== no nsys on this machine; ncu with --cache-control none --clock-control none"
    MXHOST_MX_CHAIN="${MODE:-on}" timeout 300 ncu --clock-control none --cache-control none \
        --kernel-name "regex:${NCU:-mx_}" --launch-count "${NCU_COUNT:-40}" --section SpeedOfLight \
        dist/mxhost bench --device cuda --shapes "${SHAPES:-a}" --reps 1 --warmup-ms 0 >"$out/ncu.txt" 2>&1
    echo "rc=$?"
    grep -E "^  [a-z_0-9]+.*\(|Duration" "$out/ncu.txt" | paste - - | awk '{print $1, $(NF)}' | head -60
fi
