#!/usr/bin/env bash
# Run 160 (docs/perf.md): where the default path's dgrad on the transposed copy loses its
# 150-250 µs when ncu finds its kernels as fast as the re-laid dgrad's (run 159). 1. each of the
# forward / dgrad rows alone in its own process, a and b (the row order); 2. the same rows
# timed back to back (host gaps hidden by the queue); 3. an nsys timeline of those rows on a
# (gaps between the start event and the first kernel); 4. ncu of forward and dgrad on c (the FP8
# kernel's dgrad reads 17 % slower than its forward). Default path; dist/ from scripts/dist.sh.
set -u
dev_out="${OUT:-}"
o=out/run160; mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$o/card.txt"
export MXHOST_MX_CHAIN=off
FWD="forward X 1x32 · W 32x32 (pre"; RL="dgrad dY 1x32 · W 32x32 [E,N,K] (re"; WT="dgrad dY 1x32 · W 32x32 [E,K,N]"
for i in 1 2; do
  for r in "$WT" "$FWD" "$RL"; do
    timeout 100 dist/mxhost bench --device cuda --shapes a,b,c --reps 10 --warmup-ms 300 --only "$r" >>"$o/alone.txt" 2>&1
  done
done
grep -E "^[a-d] " "$o/alone.txt" | cut -c1-150
echo "== back to back"
for i in 1 2; do
  timeout 100 dist/mxhost bench --device cuda --shapes a,b,c --reps 20 --warmup-ms 300 --back-to-back --only "$FWD,$RL,$WT" >>"$o/b2b.txt" 2>&1
done
grep -E "^[a-d] " "$o/b2b.txt" | cut -c1-150
nsys_bin=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda*/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "== nsys: $nsys_bin"
if [ -n "$nsys_bin" ]; then
  timeout 200 "$nsys_bin" profile -o "$o/prof" --trace=cuda --force-overwrite true \
     dist/mxhost bench --device cuda --shapes a --reps 3 --warmup-ms 0 --only "$FWD,$RL,$WT" >"$o/nsys-bench.txt" 2>&1; echo "rc=$?"
  "$nsys_bin" stats --report cuda_gpu_trace,cuda_api_trace --format csv -o "$o/stats" "$o/prof.nsys-rep" >"$o/stats.log" 2>&1; echo "stats rc=$?"
  rm -f "$o/prof.nsys-rep" "$o"/*.sqlite
  python3 docs/perf-runs/run160/gaps.py "$o" | tee "$o/gaps.txt"
fi
echo "== ncu c"
timeout 200 ncu --clock-control none --cache-control none --launch-count 40 --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second \
   dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "$FWD,$WT" >"$o/ncu-c.txt" 2>&1; echo "rc=$?"
if [ -n "$dev_out" ]; then tar czf "$dev_out/run160.tgz" -C "$o" .; fi
