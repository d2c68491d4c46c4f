#!/usr/bin/env bash
# Run 167 (docs/perf.md): run 166 again with the choice timed after 1.2 s of settling (cublas_tune.rs), for
# the backend's strided-batch BF16 GEMMs, against cuBLAS's own pick (MXHOST_CUBLAS_TUNE=0).
# No selftest (run 166 passed it; only when the choice is timed changed). 1. the choices on a,
# b, c (GEMM trace; the bench's short warm-up, the tuning settles by itself); 2. gpu-ab.sh under `on`, both variants interleaved, two rounds, settled 1500 ms: the wgrad
# on wgrad values, the kept-value rows, the step with wgrad values.
# The peers get 150 s (run 166's 90 s did not reach c's torch rows).
# dist/ from scripts/dist.sh; one tarball, rewritten after each step.
set -u
dev_out="${OUT:-}"
export OUT=out/run167
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run167.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
echo "== the choices"
MXHOST_MX_CHAIN=on MXHOST_MX_GEMM_TRACE=1 timeout 120 dist/mxhost bench --device cuda --shapes a,b,c --warmup-ms 100 --reps 3 \
  --only "on their wgrad values,values kept (pre-quantized)" 2>&1 | grep -E "cuBLAS tuning|cuBLASLt" | tee "$OUT/choices.txt"
cat ~/.cache/mxhost/kernels/cublas-choices.txt > "$OUT/cublas-choices.txt" 2>/dev/null
pack
SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=150 ROUNDS=2 MODE=on VARIANTS="new new+MXHOST_CUBLAS_TUNE=0" \
  ONLY="on their wgrad values,values kept (pre-quantized),X and dY with wgrad values" \
  bash scripts/gpu-ab.sh
pack
