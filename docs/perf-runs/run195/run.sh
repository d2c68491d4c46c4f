#!/usr/bin/env bash
# Run 195 (docs/perf.md): run 194's step rows again, the scales-on-demand default ("new") against
# the behaviour before run 194 (`MXHOST_MX_CHAIN_NOQ_S=0` and `-DMXQB_NOQ_S2=1`, same dist),
# three interleaved rounds on c, b, a side by side with torch BF16, so that run 194's
# first-invocation effect (every GEMM ~2 % slower in the first bench call after the peers) can
# be told apart from the change: round 1 is read as a warm-up, rounds 2 and 3 compare.
set -u
PARTS_DEFAULT="ab" source docs/perf-runs/prelude.sh run195
if has ab; then
step_ab 3 420 "new new+MXHOST_MX_CHAIN_NOQ_S=0+MXHOST_NVRTC_DEFINES=-DMXQB_NOQ_S2=1"
pack
fi
