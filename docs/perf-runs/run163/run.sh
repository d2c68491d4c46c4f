#!/usr/bin/env bash
# Run 163 (docs/perf.md): the chained forward/dgrad without A' transposed (the one-block form
# kernels skip at/sat; the gatherers read A' itself) against the copy (MXHOST_MX_CHAIN_AT=1).
# 1. selftest under `always` with poisoned outputs and without VERIFY (VERIFY keeps the copy),
# so the gathered corrections are what it checks; 2. gpu-ab.sh under `on`, the two variants
# interleaved, two rounds, a, b, c, settled 1500 ms. dist/ from scripts/dist.sh; one tarball.
set -u
dev_out="${OUT:-}"
export OUT=out/run163
mkdir -p "$OUT"
echo "== selftest, always, no VERIFY"
MXHOST_MX_CHAIN=always MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 200 dist/mxhost selftest --device cuda --quick >"$OUT/selftest-always.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest-always.txt"; grep FAIL "$OUT/selftest-always.txt" | head -5
SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=100 ROUNDS=2 MODE=on VARIANTS="new new+MXHOST_MX_CHAIN_AT=1" \
  ONLY="forward X 1x32 · W 32x32 (pre,dgrad dY 1x32 · W 32x32 [E,K,N],quantize X 1x32 + wgrad,X and dY with wgrad values,GroupedLinear with 32x32" \
  bash scripts/gpu-ab.sh
if [ -n "$dev_out" ]; then tar czf "$dev_out/run163.tgz" -C "$OUT" .; fi
