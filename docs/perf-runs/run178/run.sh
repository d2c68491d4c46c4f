#!/usr/bin/env bash
# Run 178 (docs/perf.md): why b's chained forward runs 10 % slower than its dgrad on the same
# FLOPs (run 175's step trace: 1410 against 1280 µs on an H100). The first forward and dgrad in b's
# GroupedLinear step under ncu (both builds of each: the gate lets one run, the other exits at
# once; tensor pipe, warp states, memory), and the GEMM trace's residual
# counts (how many correction entries each tile carries).
set -u
dev_out="${OUT:-}"
export OUT=out/run178
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run178.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
row="GroupedLinear with 32x32"
# (a first run compiles the kernels outside ncu; its GEMM trace gives the residual counts)
MXHOST_MX_GEMM_TRACE=1 timeout 120 dist/mxhost bench --device cuda --shapes b --reps 1 --warmup-ms 0 --only "$row" > "$OUT/trace.txt" 2>&1
grep -E "chained|residuals" "$OUT/trace.txt" | sort | uniq -c | head -12
pack
timeout "${NCU_TIMEOUT:-240}" ncu --clock-control none --cache-control none --kernel-name "regex:mx_cgemm_e4m3e4m3_w2d_bf16" --launch-count 4 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
    dist/mxhost bench --device cuda --shapes b --reps 1 --warmup-ms 0 --only "$row" > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
grep -E "mx_cgemm|Duration|Compute \(SM\)|Tensor|Stall|Warp Cycles|Issued|Memory Throughput" "$OUT/ncu.txt" | head -60
pack
