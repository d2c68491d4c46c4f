#!/usr/bin/env bash
# Run 143 (docs/perf.md): the gate memory as the default under `on` (no MXHOST_MX_CHAIN_MEMORY
# set), from the repository root with dist/ built by scripts/dist.sh (carry ["dist"]):
#   1. a GEMM trace of two outlier steps on c under plain MXHOST_MX_CHAIN=on;
#   2. the selftest under `on` with poisoned outputs, MXHOST_REQUIRE_CUDA=1.
set -u
out="${OUT:-out/run143}"
mkdir -p "$out"
unset MXHOST_MX_CHAIN_MEMORY
echo "== trace, outlier step on c, MXHOST_MX_CHAIN=on"
MXHOST_MX_CHAIN=on MXHOST_MX_GEMM_TRACE=1 timeout 70 dist/mxhost bench --device cuda --shapes c --reps 2 \
    --warmup-ms 0 --only "outlier" >"$out/trace-outlier-c.txt" 2>&1
echo "rc=$?"
for what in "gate memory" "chained gate open" "chained gate closed"; do
    echo "$what: $(grep -c "$what" "$out/trace-outlier-c.txt")"
done
echo "== selftest, on + poison"
MXHOST_MX_CHAIN=on MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 \
    dist/mxhost selftest --device cuda --quick >"$out/selftest-on.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-on.txt"; grep FAIL "$out/selftest-on.txt" | head -5
grep -E "repeated" "$out/selftest-on.txt" | head -2 | cut -c1-200
