#!/usr/bin/env bash
# The anchors' main-loop microbenchmark (mx_mainloop_overlap.cu) with the SM clock and power
# sampled, so that its work per clock is known (docs/perf.md run 78). On the GPU machine, from
# the repository root with dist/ built by scripts/dist.sh (which copies the anchor source
# there: shared/ does not travel): bash plugin-mxfp8/cuda/bench/anchor_clock.sh [anchor.cu]
# Prints the file's own best-of-5 rows, then launches its F kernel with 32x32 weight scales
# for ~3 s (the power limiter settled) and reports TFLOP/s and the SM clock and power of the
# last 2 s of nvidia-smi samples.
set -uo pipefail
src="${1:-dist/mx_mainloop_overlap.cu}"
out="${OUT:-/tmp}"
tmp="$(mktemp -d)"
[ -f "$src" ] || { echo "anchor_clock.sh: $src not found (scripts/dist.sh copies it from ../shared/anchors)"; exit 1; }
# The sustained driver: the file's main() with only vF2d, then ~3 s of back-to-back launches.
python3 - "$src" "$tmp/ov_sustained.cu" <<'PY'
import sys
src = open(sys.argv[1]).read()
j = src.index('  for (int ctas : {264}) {')
k = src.index('  return 0;', j)
body = '''  for (int ctas : {264}) {
    run("F 8-step, 32x32 weight scales", vF2d, ctas, 8, dA, dB, dS, dO);
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    int iters = 24000, n = 0; float ms = 0.f; CK(cudaEventRecord(e0));
    for (; n < 4000; ++n) {
      vF2d<<<ctas, 128>>>(dA, dB, dS, dO, iters);
      if (n % 50 == 49) { CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1)); if (ms > 3000) { ++n; break; } }
    }
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
    double flops = 2.0 * 64 * 128 * 32 * (double)iters * ctas * n;
    printf("F 8-step 32x32, sustained %d launches in %.0f ms: %7.1f TFLOP/s\\n", n, ms, flops / (ms * 1e-3) / 1e12);
  }
'''
open(sys.argv[2], 'w').write(src[:j] + body + src[k:])
PY
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o "$tmp/ov" "$src" 2>/dev/null || { echo "nvcc failed on $src"; exit 1; }
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o "$tmp/ovs" "$tmp/ov_sustained.cu" 2>/dev/null || { echo "nvcc failed on the sustained driver"; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv,noheader -lms 50 \
    > "$out/anchor_smi.csv" &
smi=$!
sleep 0.5
"$tmp/ov"
"$tmp/ovs"
kill "$smi"
echo "SM MHz min / mean / max and mean W over the last 2 s (the sustained F), busy samples (> 100 W):"
tail -40 "$out/anchor_smi.csv" | awk -F', ' '{gsub(/ MHz/,"",$2); gsub(/ W/,"",$3);
    if ($3+0 > 100) {n++; s+=$2; p+=$3; if (min==""||$2<min) min=$2; if ($2>max) max=$2}}
    END {if (n) printf "%d samples: %d / %.0f / %d MHz, %.0f W\n", n, min, s/n, max, p/n}'
rm -rf "$tmp"
