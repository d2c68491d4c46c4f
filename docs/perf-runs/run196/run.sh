#!/usr/bin/env bash
# Run 196 (docs/perf.md): the chained GEMM's narrow split, new by default (a GEMM whose last
# column of 128-wide tiles holds at most 64 columns inside N computes it in a narrow kernel, n64
# wgmmas, on a second stream beside the main launch, which skips it: shape c's forward and
# dgrad). First the selftest (poisoned outputs, nothing set and under `always`, no VERIFY); then
# the GroupedLinear step on c, b, a beside torch BF16, two interleaved rounds of three builds:
# new | MXHOST_MX_CHAIN_NARROW=0 | that and the behaviour before run 194 (MXHOST_MX_CHAIN_NOQ_S=0,
# -DMXQB_NOQ_S2=1; run 195's comparison, folded in here).
set -u
PARTS_DEFAULT="selftest ab" source docs/perf-runs/prelude.sh run196
if has selftest; then
selftest_modes auto always
pack
fi
if has ab; then
step_ab 2 400 "new new+MXHOST_MX_CHAIN_NARROW=0 new+MXHOST_MX_CHAIN_NARROW=0+MXHOST_MX_CHAIN_NOQ_S=0+MXHOST_NVRTC_DEFINES=-DMXQB_NOQ_S2=1"
pack
fi
