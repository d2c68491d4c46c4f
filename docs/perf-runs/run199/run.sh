#!/usr/bin/env bash
# Run 199 (docs/perf.md): the host's fix of the partner's lifetime (380c72a: a transposing
# quantize's result keeps its partner's annex alive, not only its data) and `at` where read on
# by default. The selftest (poisoned outputs, no VERIFY) with nothing set, under `always`, and
# under `always` with MXHOST_MX_CHAIN_AT_NEED=0: run 198's failing case (dgrad on a `Kn` weight
# quantized before A, A residual-carried, under `always`) passes in each.
set -u
PARTS_DEFAULT="selftest" source docs/perf-runs/prelude.sh run199
if has selftest; then
selftest_modes auto always
MXHOST_MX_CHAIN_AT_NEED=0 SELFTEST_TAG=at-whole selftest_modes always
pack
fi
