#!/usr/bin/env bash
# Run 141 (docs/perf.md): the gate memory (chain_memory.rs, MXHOST_MX_CHAIN_MEMORY=1) on the
# device, in one call from the repository root with dist/ built by scripts/dist.sh (carry
# ["dist"]), in this order so that a call cut short by device time keeps the most:
#   1. a GEMM trace of three outlier steps on c under `on` with the memory (which kernel
#      computed each GEMM);
#   2. the selftest under `on` with the memory and poisoned outputs (VERIFY would turn the
#      memory off), MXHOST_REQUIRE_CUDA=1;
#   3. scripts/gpu-ab.sh (shapes c, b, a in that order, so a short peer budget still times c):
#      bench_peers.py, then the default path, `on` with the memory and plain `on`, interleaved
#      over two rounds (forward, dgrad, both steps), summary table;
#   4. the default selftest (the default path's code changed least).
# SHORT=1 fits ~300 s of device time: one round on c and b (forward and the steps), a shorter
# peer budget, no default selftest. Everything ends in one tarball under $OUT.
set -u
out="${OUT:-out/run141}"
mkdir -p "$out"
on="MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_MEMORY=1"
echo "== trace, outlier step on c"
env $on MXHOST_MX_GEMM_TRACE=1 timeout 70 dist/mxhost bench --device cuda --shapes c --reps 3 \
    --warmup-ms 0 --only "outlier" >"$out/trace-outlier-c.txt" 2>&1
echo "rc=$?"
for what in "gate memory" "chained gate open" "chained gate closed"; do
    echo "$what: $(grep -c "$what" "$out/trace-outlier-c.txt")"
done
echo "== selftest, on + memory + poison"
env $on MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 \
    dist/mxhost selftest --device cuda --quick >"$out/selftest-on.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-on.txt"; grep FAIL "$out/selftest-on.txt" | head -5
if [ "${SHORT:-0}" = 1 ]; then
    shapes=c,b budget=40 rounds=1 rows="forward X 1x32 · W 32x32 (pre,step: 3"
else
    shapes=c,b,a budget=75 rounds=2 rows="forward X 1x32 · W 32x32 (pre,dgrad dY 1x32 · W 32x32 [E,K,N],step: 3"
fi
OUT="$out/ab" SELFTEST=0 SHAPES=$shapes PEER_BUDGET_S=$budget MODE=on ROUNDS=$rounds \
    VARIANTS="new+MXHOST_MX_CHAIN=off new+MXHOST_MX_CHAIN_MEMORY=1 new" ONLY="$rows" bash scripts/gpu-ab.sh
if [ "${SHORT:-0}" != 1 ]; then
    echo "== default selftest"
    MXHOST_REQUIRE_CUDA=1 timeout 150 dist/mxhost selftest --device cuda --quick >"$out/selftest-default.txt" 2>&1
    echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-default.txt"; grep FAIL "$out/selftest-default.txt" | head -5
fi
cd "$out" && tar czf /tmp/run141.tgz ./* && rm -rf ./* && mv /tmp/run141.tgz ./run141.tgz
