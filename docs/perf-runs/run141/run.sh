#!/usr/bin/env bash
# Run 141 (docs/perf.md): the gate memory (chain_memory.rs) on the device, in one call from the
# repository root with dist/ built by scripts/dist.sh (carry ["dist"]):
#   1. a GEMM trace of three outlier steps on c under `on` (which kernel computed each GEMM);
#   2. the selftest under MXHOST_MX_CHAIN=on with poisoned outputs (the memory active: VERIFY
#      would turn it off), with MXHOST_REQUIRE_CUDA=1;
#   3. scripts/gpu-ab.sh (shapes c, b, a in that order, so a short peer budget still times c):
#      bench_peers.py, then the default path, `on` with the gate memory
#      (MXHOST_MX_CHAIN_MEMORY=1, opt-in) and plain `on`, interleaved over two rounds
#      (forward, dgrad, both steps), summary table;
#   4. the default selftest (last: the default path's code changed least).
# (In this order so that a call cut short by the session's device time keeps the most.)
# Everything ends in one tarball under $OUT.
set -u
out="${OUT:-out/run141}"
mkdir -p "$out"
echo "== trace, outlier step on c"
MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_MEMORY=1 MXHOST_MX_GEMM_TRACE=1 timeout 60 dist/mxhost bench --device cuda --shapes c --reps 3 \
    --warmup-ms 0 --only "outlier" >"$out/trace-outlier-c.txt" 2>&1
echo "rc=$?"; grep -c "gate memory" "$out/trace-outlier-c.txt"; grep -c "chained gate open" "$out/trace-outlier-c.txt"
grep -c "chained gate closed" "$out/trace-outlier-c.txt"; grep -E "mxhost-plugin-mxfp8" "$out/trace-outlier-c.txt" | cut -c1-150 | head -24
echo "== selftest, on + poison"
MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_MEMORY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 \
    dist/mxhost selftest --device cuda --quick >"$out/selftest-on.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-on.txt"; grep FAIL "$out/selftest-on.txt" | head -5
OUT="$out/ab" SELFTEST=0 SHAPES=c,b,a PEER_BUDGET_S=75 MODE=on ROUNDS=2 \
    VARIANTS="new+MXHOST_MX_CHAIN=off new+MXHOST_MX_CHAIN_MEMORY=1 new" \
    ONLY="forward X 1x32 · W 32x32 (pre,dgrad dY 1x32 · W 32x32 [E,K,N],step: 3" bash scripts/gpu-ab.sh
echo "== default selftest"
MXHOST_REQUIRE_CUDA=1 timeout 150 dist/mxhost selftest --device cuda --quick >"$out/selftest-default.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-default.txt"; grep FAIL "$out/selftest-default.txt" | head -5
cd "$out" && tar czf /tmp/run141.tgz ./* && rm -rf ./* && mv /tmp/run141.tgz ./run141.tgz
