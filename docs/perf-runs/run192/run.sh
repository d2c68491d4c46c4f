#!/usr/bin/env bash
# Run 192 (docs/perf.md): the current state of every target in one call, side by side with torch
# BF16 (the "Current state" table was run 170's): every mxhost bench row on a, b and c under the
# default (`auto`) with the step trace, one round, the peers 40 s per shape (scripts/gpu-peers.sh) so that c's get
# measured; first the opt-in chained wgrad's selftest (edge cases) under the selftest's new
# summation-order gate for its "wgrad values" check.
set -u
PARTS_DEFAULT="chain bench" source docs/perf-runs/prelude.sh run192
if has chain; then
MXHOST_MX_CHAIN_WGRAD=1 MXHOST_MX_CHAIN=always MXHOST_POISON_OUTPUTS=1 timeout 120 dist/mxhost selftest --device cuda --shapes "" \
  > "$OUT/chain-wgrad-selftest.txt" 2>&1
echo "chain rc=$?"; grep -E "FAIL|checks," "$OUT/chain-wgrad-selftest.txt" | cut -c1-220 | head -6
grep -E "wgrad values .*K 2880 N 320 E4m3 Rceil " "$OUT/chain-wgrad-selftest.txt" | head -1 | cut -c1-400
pack
fi
if has bench; then
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=0 SHAPES="${SHAPES:-c,a,b}" PEER_BUDGET_S=${PEER_BUDGET_S:-40} ROUNDS=1 MODE=auto VARIANTS="new" \
  ONLY="quantize,forward,dgrad,wgrad,step" OUT="$OUT/ab" timeout ${AB_TIMEOUT_S:-330} bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "bench rc=$?"
cut -c1-150 "$OUT/ab/summary.txt" 2>/dev/null | head -60
grep -E "_grouped_mm (fwd|dgrad|wgrad|fwd\+dgrad\+wgrad)" "$OUT/ab/peers.txt" | cut -c1-120
pack
fi
