#!/usr/bin/env bash
# Run 180 (docs/perf.md): the weight's bytes on demand as the default (since runs 177-179),
# against MXHOST_MX_CHAIN_NOQ_W=0 (the weight written whole), on a and c (b: runs 177 and 179): the two
# training-step rows a GroupedLinear user meets, two interleaved rounds, with the step trace,
# side by side with torch BF16 (bench_peers.py).
set -u
dev_out="${OUT:-}"
export OUT=out/run180
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run180.tgz" -C "$OUT" .; fi; }
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=0 SHAPES=a,c PEER_BUDGET_S=90 ROUNDS=2 MODE=auto \
  VARIANTS="new new+MXHOST_MX_CHAIN_NOQ_W=0" ONLY="GroupedLinear with 32x32,X and dY with wgrad values" \
  OUT="$OUT/ab" timeout 330 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; cat "$OUT/ab/summary.txt" 2>/dev/null | head -30
for f in "$OUT"/ab/ab-*.txt; do echo "${f##*/}"; grep -o "step trace \[.*" "$f" | sed 's/GPU µs (host enqueue µs) //' | cut -c1-220; done
pack
