#!/usr/bin/env bash
# Run 198 (docs/perf.md): plugin ABI 1.9's named weight. X's and dY's quantize calls in the
# GroupedLinear step name the weight their GEMM reads (the bench's step quantizes W first, as
# guest-sdk's GroupedLinear), and the form kernel stores `at` only in the 16-row chunks at the
# reduction indices where that weight's experts have residuals (mx_chain_need_map + the masked
# store). Part `selftest`: the selftest (poisoned outputs, nothing set and under `always`, no
# VERIFY) with MXHOST_MX_CHAIN_AT_NEED=1 (opt-in), whose new cases name the weight fresh and
# stale. Part `ab`: the step on c, b, a beside torch BF16, two interleaved rounds of
# MXHOST_MX_CHAIN_AT_NEED=1 | the default (the whole copy),
# after a warm round, with ncu durations of the form kernels in one step on c per variant.
# SELFTEST_MODES (default "auto always"), and prelude.sh's PEER_BUDGET_S / AB_TIMEOUT_S, trim
# the call to fit one device call.
set -u
PARTS_DEFAULT="selftest ab" source docs/perf-runs/prelude.sh run198
if has selftest; then
MXHOST_MX_CHAIN_AT_NEED=1 selftest_modes ${SELFTEST_MODES:-auto always}
pack
fi
if has ab; then
NCU="mx_quantize_rows_form|mx_chain_need_map" NCU_ONLY="GroupedLinear with 32x32" NCU_SHAPE=c \
    WARM_ROUND=1 step_ab 2 480 "new+MXHOST_MX_CHAIN_AT_NEED=1 new"
grep -E "mx_quantize_rows_form|mx_chain_need_map" "$OUT/ab/summary.txt" | head -12
pack
fi
