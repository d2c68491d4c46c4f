#!/usr/bin/env bash
# Run 146 (docs/perf.md): the one-launch weight quantizer with its bf16 input staged by cp.async
# (all 32 KB of a block in flight; run 145 found its warps waiting on the loads 41 % of the time),
# against the build before it (dist/old/, da722cd's plugin). From the repository root with dist/
# built by scripts/dist.sh and the old plugin in dist/old/ (carry ["dist"]), ~350 s:
# the selftest under `always` with VERIFY (the pair kernel's W, Wᵀ and forms compared with the
# tile quantizer's and the re-encoding's on every call) and poisoned outputs, then
# scripts/gpu-ab.sh's A/B on a, b, c (quantize X, W + Wᵀ, the step: two rounds, old and new
# interleaved) and ncu of the pair kernel on c.
set -u
OUT="${OUT:-out/run146}" NCU="mx_quantize_pair" NCU_ONLY="W 32x32 + transposed" NCU_COUNT=3 \
    ROUNDS=2 bash scripts/gpu-ab.sh
