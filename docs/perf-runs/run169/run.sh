#!/usr/bin/env bash
# Run 169 (docs/perf.md): run 168 again after 4bc21b8 (choices looked up by (context, problem), the file by its key only on a miss): the default selftest with
# poisoned outputs, then two bench processes on shape a with the GEMM trace: the first times
# its cuBLAS problems (lines "cuBLAS tuning"), the second must read them from
# cublas-choices.txt and time none.
set -u
dev_out="${OUT:-}"
export OUT=out/run169
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run169.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
rm -f ~/.cache/mxhost/kernels/cublas-choices.txt
MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 200 dist/mxhost selftest --device cuda --quick > "$OUT/selftest.txt" 2>&1
echo "selftest rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest.txt"; grep -E "FAIL|cuBLASLt" "$OUT/selftest.txt" | head -5
for p in 1 2; do
    MXHOST_MX_GEMM_TRACE=1 timeout 90 dist/mxhost bench --device cuda --shapes a --warmup-ms 100 --reps 3 \
      --only "on their wgrad values,values kept (pre-quantized)" > "$OUT/bench-$p.txt" 2>&1
    echo "process $p rc=$?: $(grep -c 'cuBLAS tuning' "$OUT/bench-$p.txt") problems timed"; grep -E "^a " "$OUT/bench-$p.txt" | cut -c1-110
done
cp ~/.cache/mxhost/kernels/cublas-choices.txt "$OUT/" 2>/dev/null; echo "choices file: $(wc -l < "$OUT/cublas-choices.txt") lines"
pack
# Then where one `on` step with X and dY quantized with their wgrad values goes, kernel by kernel
# (ncu, scripts/gpu-breakdown.sh; the step row in the default step's place through
# MXHOST_BENCH_STEP_WGRAD_VALUES=1). cuBLAS's own algorithm (MXHOST_CUBLAS_TUNE=0): under ncu
# the tuning's timing loops would be profiled launch by launch.
MXHOST_BENCH_STEP_WGRAD_VALUES=1 MXHOST_CUBLAS_TUNE=0 ONLY="(bf16 in)" TAG=stepwv OUT="$OUT/breakdown" \
    timeout 420 bash scripts/gpu-breakdown.sh > "$OUT/breakdown.txt" 2>&1
echo "breakdown rc=$?"; grep -E "bench row|^ +[0-9.]+ +[0-9.]+  " "$OUT/breakdown.txt" | tail -80
pack
