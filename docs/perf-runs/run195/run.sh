#!/usr/bin/env bash
# Run 195 (docs/perf.md): run 194's step rows again, the scales-on-demand default ("new") against
# the behaviour before run 194 (`MXHOST_MX_CHAIN_NOQ_S=0` and `-DMXQB_NOQ_S2=1`, same dist),
# three interleaved rounds on c, b, a side by side with torch BF16, so that run 194's
# first-invocation effect (every GEMM ~2 % slower in the first bench call after the peers) can
# be told apart from the change: round 1 is read as a warm-up, rounds 2 and 3 compare.
set -u
PARTS_DEFAULT="ab" source docs/perf-runs/prelude.sh run195
if has ab; then
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=0 SHAPES="${SHAPES:-c,b,a}" PEER_BUDGET_S=${PEER_BUDGET_S:-40} ROUNDS=${ROUNDS:-3} MODE=auto \
  VARIANTS="new new+MXHOST_MX_CHAIN_NOQ_S=0+MXHOST_NVRTC_DEFINES=-DMXQB_NOQ_S2=1" ONLY="GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout ${AB_TIMEOUT_S:-420} bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
ab_report $?
pack
fi
