#!/usr/bin/env bash
# Run 148 (docs/perf.md): the chained GEMM's last stage with two k32 wgmmas instead of four when
# K % 128 is at most 64 (c: K = 2880), against the build before it (dist/old/, d46b119's
# plugin). From the repository root with dist/ built by scripts/dist.sh and the old plugin in
# dist/old/ (carry ["dist"]), ~280 s: the selftest under `on` with VERIFY and poisoned outputs,
# then scripts/gpu-ab.sh on c (forward, dgrad with Wᵀ, the step; three rounds, old and new
# interleaved) and ncu of the chained kernels of c's forward row. Everything is written under
# out/run148 and returned as one tarball in $OUT (the device returns at most 8 files).
set -u
dev_out="${OUT:-}"
export OUT=out/run148
SELFTEST=on SHAPES=c PEER_BUDGET_S=40 ROUNDS=3 NCU="mx_cgemm" NCU_COUNT=4 \
    NCU_ONLY="forward X 1x32 · W 32x32 (pre" \
    ONLY="forward X 1x32 · W 32x32 (pre,dgrad dY 1x32 · W 32x32 [E,K,N] (transposed copy),step: 3" \
    bash scripts/gpu-ab.sh
if [ -n "$dev_out" ]; then tar czf "$dev_out/run148.tgz" -C "$OUT" .; fi
