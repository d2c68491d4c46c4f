#!/usr/bin/env bash
# Run 183 (docs/perf.md): the chained GEMM's short last stage (a last stage with at most 64 of K
# runs two k32 wgmmas of four; K 2880: 1 of 23 stages) against all four
# (-DMXC_NO_SHORT_LAST), on c's forward, dgrad and GroupedLinear step, two interleaved rounds,
# side by side with torch BF16; first the selftest with every GEMM on the chained path
# (MXHOST_MX_CHAIN=always), VERIFY and poisoned outputs.
set -u
dev_out="${OUT:-}"
export OUT=out/run183
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run183.tgz" -C "$OUT" .; fi; }
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=always SHAPES=c PEER_BUDGET_S=60 ROUNDS=2 MODE=auto \
  VARIANTS="new new+MXHOST_NVRTC_DEFINES=-DMXC_NO_SHORT_LAST" \
  ONLY="(pre-quantized),(transposed copy),GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 420 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; tail -3 "$OUT/ab/selftest.txt" 2>/dev/null; cat "$OUT/ab/summary.txt" 2>/dev/null | head -30
for f in "$OUT"/ab/ab-*.txt; do echo "${f##*/}"; grep -o "step trace \[.*" "$f" | sed 's/GPU µs (host enqueue µs) //' | cut -c1-220; done
pack
