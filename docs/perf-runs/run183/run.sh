#!/usr/bin/env bash
# Run 183 (docs/perf.md): two changes to the chained GEMM, each against the default in
# interleaved rounds, side by side with torch BF16, on b and c (forward, GroupedLinear step with its trace):
# - the short last stage (a last stage with at most 64 of K runs two k32 wgmmas of four; K 2880:
#   1 of 23 stages; built in, -DMXC_NO_SHORT_LAST runs all four);
# - the TMA-store epilogue (MXHOST_MX_CHAIN_TMA_STORE=1: full tiles keep their last stage's
#   buffer as staging and leave through TMA, under the next tile's main loop).
# First the selftest with every GEMM on the chained path (MXHOST_MX_CHAIN=always) and the TMA-store
# epilogue on, with VERIFY and poisoned outputs.
set -u
dev_out="${OUT:-}"
export OUT=out/run183
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run183.tgz" -C "$OUT" .; fi; }
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=always SELFTEST_ENV="MXHOST_MX_CHAIN_TMA_STORE=1" SHAPES=b,c PEER_BUDGET_S=45 ROUNDS=1 MODE=auto \
  VARIANTS="new new+MXHOST_NVRTC_DEFINES=-DMXC_NO_SHORT_LAST new+MXHOST_MX_CHAIN_TMA_STORE=1" \
  ONLY="forward X 1x32 · W 32x32 (pre-quantized),GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 330 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; tail -3 "$OUT/ab/selftest.txt" 2>/dev/null; cat "$OUT/ab/summary.txt" 2>/dev/null | head -40
for f in "$OUT"/ab/ab-*.txt; do echo "${f##*/}"; grep -o "step trace \[.*" "$f" | sed 's/GPU µs (host enqueue µs) //' | cut -c1-220; done
pack
