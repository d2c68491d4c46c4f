#!/usr/bin/env bash
# Run 141, short form (docs/perf.md): what run.sh does, cut to ~300 s of device time: the trace
# of the outlier step on c, one interleaved round of the default path, `on` with the gate memory
# (MXHOST_MX_CHAIN_MEMORY=1) and plain `on` on c and b (peers first, c then b), then the
# selftest under `on` with the memory and poisoned outputs. One tarball under $OUT.
set -u
out="${OUT:-out/run141}"
mkdir -p "$out"
echo "== trace, outlier step on c"
MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_MEMORY=1 MXHOST_MX_GEMM_TRACE=1 timeout 70 dist/mxhost bench --device cuda --shapes c --reps 3 \
    --warmup-ms 0 --only "outlier" >"$out/trace-outlier-c.txt" 2>&1
echo "rc=$?"; grep -c "gate memory" "$out/trace-outlier-c.txt"; grep -c "chained gate open" "$out/trace-outlier-c.txt"
grep -c "chained gate closed" "$out/trace-outlier-c.txt"
OUT="$out/ab" SELFTEST=0 SHAPES=c,b PEER_BUDGET_S=40 MODE=on ROUNDS=1 \
    VARIANTS="new+MXHOST_MX_CHAIN=off new+MXHOST_MX_CHAIN_MEMORY=1 new" \
    ONLY="forward X 1x32 · W 32x32 (pre,step: 3" bash scripts/gpu-ab.sh
echo "== selftest, on + poison"
MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_MEMORY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 100 \
    dist/mxhost selftest --device cuda --quick >"$out/selftest-on.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-on.txt"; grep FAIL "$out/selftest-on.txt" | head -5
cd "$out" && tar czf /tmp/run141.tgz ./* && rm -rf ./* && mv /tmp/run141.tgz ./run141.tgz
