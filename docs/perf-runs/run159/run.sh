#!/usr/bin/env bash
# Run 159 (docs/perf.md): why the default path's dgrad on the weight's transposed copy reads
# 10-15 % slower than the same dgrad on the weight as stored (re-laid, run 141: a 0.87-0.90
# against 0.99, b 0.82 against 0.95) while forward, with a's identical dimensions and layout,
# is not. 1. peers (a, b, c); 2. one bench pass of the forward / dgrad rows with
# MXHOST_MX_GEMM_TRACE=1 (which kernels); 3. those rows, two rounds, default path; 4. ncu
# durations and SM clocks of every kernel in one rep of those rows on a and b; 5. torch.bmm at
# the same dimensions in each weight layout (cublas_layouts.py). From the repository root with
# dist/ built by scripts/dist.sh (carry ["dist"]); one tarball back in $OUT.
set -u
dev_out="${OUT:-}"
o=out/run159; mkdir -p "$o"
here=docs/perf-runs/run159
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$o/card.txt"
ROWS="forward X 1x32 · W 32x32 (pre,dgrad dY 1x32 · W 32x32 [E"
export MXHOST_MX_CHAIN=off
echo "== peers"; OUT="$o" timeout 150 python3 dist/bench_peers.py --shapes a,b,c --budget-s 100 --warmup 500 --rep 500 >"$o/peers.txt" 2>&1; echo "rc=$?"
echo "== trace"; MXHOST_MX_GEMM_TRACE=1 timeout 120 dist/mxhost bench --device cuda --shapes a,b --reps 1 --warmup-ms 0 --only "$ROWS" >"$o/trace.txt" 2>&1; echo "rc=$?"
grep -E "rows GEMM|dequantize|^[ab] " "$o/trace.txt" | sort | uniq -c | head -30
for i in 1 2; do
  echo "== bench round $i"
  timeout 150 dist/mxhost bench --device cuda --shapes a,b,c --reps 10 --warmup-ms 300 --only "$ROWS" --peers "$o/peer_bench.csv" >"$o/bench-$i.txt" 2>&1; echo "rc=$?"
  grep -E "^[a-d] " "$o/bench-$i.txt" | cut -c1-160
done
for s in a b; do
  echo "== ncu $s"
  timeout 200 ncu --clock-control none --cache-control none --launch-count 60 \
     --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second \
     dist/mxhost bench --device cuda --shapes $s --reps 1 --warmup-ms 0 --only "$ROWS" >"$o/ncu-$s.txt" 2>&1; echo "rc=$?"
  grep -E "^  [A-Za-z_0-9]+|gpu__time_duration|sm__cycles_elapsed" "$o/ncu-$s.txt" | paste - - - | awk '{print $1, $(NF-5), $(NF-4), $NF}' | cut -c1-200 | head -60
done
echo "== torch.bmm layouts"; timeout 120 python3 $here/cublas_layouts.py a,b,c 2>&1 | tee "$o/bmm.txt"
if [ -n "$dev_out" ]; then tar czf "$dev_out/run159.tgz" -C "$o" .; fi
