#!/usr/bin/env bash
# Run 164 (docs/perf.md): the chained forward/dgrad without A' transposed, B's correction
# columns captured from the main loop's shared-memory stages (mxc_capture) for tiles with at
# most 41 B entries (global gather above), against the copy (MXHOST_MX_CHAIN_AT=1, the code of
# run 162). 1. selftests with poisoned outputs and without VERIFY (VERIFY keeps the copy) under
# `always` (the four new "B residual-carried" cases among them);
# 2. gpu-ab.sh under `on`, the two variants interleaved, two rounds, a, b, c, settled 1500 ms
# (forward, dgrad, the step with X and dY quantized with wgrad values: what ~250 s of device
# time left after failed machine starts allows; the quantizer's row is run 163's kernel).
# dist/ from scripts/dist.sh; one tarball.
set -u
dev_out="${OUT:-}"
export OUT=out/run164
mkdir -p "$OUT"
for m in always; do
    echo "== selftest, MXHOST_MX_CHAIN=$m, no VERIFY"
    MXHOST_MX_CHAIN=$m MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 200 dist/mxhost selftest --device cuda --quick >"$OUT/selftest-$m.txt" 2>&1
    echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest-$m.txt"; grep -E "FAIL" "$OUT/selftest-$m.txt" | head -5
    grep -E "B residual-carried" "$OUT/selftest-$m.txt" | head -4
done
# (a tarball after each step: a call cut short by its time limit still returns what it did)
if [ -n "$dev_out" ]; then tar czf "$dev_out/run164.tgz" -C "$OUT" .; fi
SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=60 ROUNDS=2 MODE=on VARIANTS="new new+MXHOST_MX_CHAIN_AT=1" \
  ONLY="forward X 1x32 · W 32x32 (pre,dgrad dY 1x32 · W 32x32 [E,K,N],X and dY with wgrad values" \
  bash scripts/gpu-ab.sh
if [ -n "$dev_out" ]; then tar czf "$dev_out/run164.tgz" -C "$OUT" .; fi
