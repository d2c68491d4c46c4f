#!/usr/bin/env bash
# Run 147 (docs/perf.md): the X/dY form kernel with four blocks per CTA and the next block's
# input copied by cp.async while one is quantized (MXHOST_MX_CHAIN_FORM4=1), against the
# one-block kernel (the default, unchanged) and the four-block kernel without the copies
# (dist/old/, 2b03e8d's plugin). From the repository root with dist/ built by scripts/dist.sh
# and the old plugin in dist/old/ (carry ["dist"]), ~460 s: the selftest under `always` with
# VERIFY, poisoned outputs and FORM4 (the form kernel's every output compared on the device
# with the flat quantizer and the re-encoding's), then scripts/gpu-ab.sh on a, b, c (quantize X,
# W + Wᵀ, the step; two rounds, the variants interleaved) and ncu of the form kernels on c.
set -u
OUT="${OUT:-out/run147}" SELFTEST_ENV="MXHOST_MX_CHAIN_FORM4=1" \
    VARIANTS="new new+MXHOST_MX_CHAIN_FORM4=1 old+MXHOST_MX_CHAIN_FORM4=1" \
    NCU="mx_quantize_rows_form" NCU_ONLY="quantize X 1x32 (bf16" NCU_COUNT=3 \
    ROUNDS=2 bash scripts/gpu-ab.sh
