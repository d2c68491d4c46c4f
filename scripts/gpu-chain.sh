#!/usr/bin/env bash
# The chained forward/dgrad on a GPU machine (docs/perf.md runs 107-108), from the repository
# root with dist/ built by scripts/dist.sh; logs under $OUT (or out/gpu-chain). In one call:
#   1. the selftest with MXHOST_MX_CHAIN=always (every GEMM the chained kernel can take goes
#      to it; outputs poisoned), with a count of where each chained launch read its operands'
#      chain forms (annex = filled by the quantizer, ABI 1.3) and which kernel the gate chose;
#      this one and 2 run under MXHOST_MX_CHAIN_VERIFY=1, which fails a call whose chain forms
#      differ from the separate launches': in 1 X's and dY's forms by mx_quantize_rows_form
#      (run 120) or mx_reencode_block (run 119), in 2 by the fused quantizer (MXHOST_MX_CHAIN_FUSED=1), in both a weight's paired
#      annexes (run 118);
#   2. the selftest with MXHOST_MX_CHAIN=on; 3. the default selftest (the chained path off);
#   4. bench_peers.py, then `mxhost bench` in each of MODES (default "off on") on the same card,
#      with one traced rep of `on` first (gate decisions and operand sources);
#   5. with AB=N (needs dist/libmxbench.so): the chained kernel's builds timed in N interleaved
#      rounds by the harness (chain.py --ab: 4 vs 3 stages, 16- vs 4-byte-store epilogue; run 110;
#      AB_BUILDS="_s3,_s3_cc" picks others);
#   6. with NCU=regex: an ncu profile of the matching kernels (run 114).
set -u
out="${OUT:-out/gpu-chain}"
mkdir -p "$out"
shapes="${SHAPES:-a,b,c}"
W="${WARMUP_MS:-1500}"   # the power limiter's settle (docs/gpu.md, perf.md runs 159-161)
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$out/card.txt"
echo "== selftest, MXHOST_MX_CHAIN=always"
MXHOST_MX_CHAIN=always MXHOST_MX_CHAIN_FUSED=0 MXHOST_MX_CHAIN_VERIFY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 150 \
    dist/mxhost selftest --device cuda --quick >"$out/selftest-always.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest:" "$out/selftest-always.txt"
grep -o "chained; A [a-z -]*, B [a-z -]*" "$out/selftest-always.txt" | sort | uniq -c
grep -o "the [34]-stage chained GEMM computed the output\|the per-k32 kernel computed the output" \
    "$out/selftest-always.txt" | sort | uniq -c
grep -E "FAIL" "$out/selftest-always.txt" | head -20
echo "== selftest, MXHOST_MX_CHAIN=on, the fused quantizer checked against the four launches"
MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_FUSED=1 MXHOST_MX_CHAIN_VERIFY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 \
    dist/mxhost selftest --device cuda --quick >"$out/selftest-on-verify.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest:" "$out/selftest-on-verify.txt"; grep -E "FAIL|VERIFY" "$out/selftest-on-verify.txt" | head
# WGRAD_SELFTEST=1: the selftest under `always` with the chained wgrad too (run 135)
if [ "${WGRAD_SELFTEST:-0}" = 1 ]; then
    echo "== selftest, MXHOST_MX_CHAIN=always MXHOST_MX_CHAIN_WGRAD=1"
    MXHOST_MX_CHAIN=always MXHOST_MX_CHAIN_WGRAD=1 MXHOST_MX_CHAIN_VERIFY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 \
        MXHOST_MX_GEMM_TRACE=1 timeout 150 dist/mxhost selftest --device cuda --quick >"$out/selftest-wgrad.txt" 2>&1
    echo "rc=$?"; grep -E "^mxhost selftest:" "$out/selftest-wgrad.txt"; grep -E "FAIL" "$out/selftest-wgrad.txt" | head
    echo "chained wgrad taken: $(grep -c 'chained (both operands' "$out/selftest-wgrad.txt")"
fi
# (DEFAULT_SELFTEST=0 skips it: a run that changed only the opt-in paths)
if [ "${DEFAULT_SELFTEST:-1}" != 0 ]; then
    echo "== selftest, default"
    MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 dist/mxhost selftest --device cuda --quick \
        >"$out/selftest-default.txt" 2>&1
    echo "rc=$?"; grep -E "^mxhost selftest:" "$out/selftest-default.txt"; grep -E "FAIL" "$out/selftest-default.txt" | head
fi
echo "== bench_peers.py"
# (PEER_BUDGET_S per shape: scripts/gpu-peers.sh runs the shapes one by one)
bash scripts/gpu-peers.sh "$out" "$shapes" "${PEER_BUDGET_S:-40}" --warmup "$W" --rep 500
echo "peers rc=$?"
echo "== one traced rep, MXHOST_MX_CHAIN=on"
MXHOST_MX_CHAIN=on MXHOST_MX_GEMM_TRACE=1 timeout 200 dist/mxhost bench --device cuda --shapes "$shapes" --reps 1 \
    --warmup-ms 0 2>"$out/trace-on.txt" >/dev/null
grep -oE "chained; A [a-z -]*, B [a-z -]*|chained gate (open|closed) \([^)]*\)[^:]*: the [a-z0-9 -]*" \
    "$out/trace-on.txt" | sed 's/ ([0-9]* residuals, limit [0-9]*)//' | sort | uniq -c
# ONLY="quantize,step:" passes --only to every bench (those rows alone: a shorter call).
# MODES: e.g. "off on on-fused on": on-fused is `on` with MXHOST_MX_CHAIN_FUSED=1 (X's and
# dY's chain forms by mx_quantize_rows_chain_* instead of four launches; run 113); on-unpaired
# is `on` with MXHOST_MX_CHAIN_PAIR=0 (a weight's two annexes filled one at a time; run 118);
# on-unblocked is `on` with MXHOST_MX_CHAIN_BLOCK=0 (X's and dY's forms by a re-encoding and two
# transposes instead of mx_reencode_block; run 119); on-split is `on` with MXHOST_MX_CHAIN_FORM=0
# (the flat quantizer, then mx_reencode_block, instead of mx_quantize_rows_form; run 120);
# on-copies is `on` with MXHOST_MX_CHAIN_PARTNER=0 (a weight's annexes hold copies of their
# partner's bytes, as before ABI 1.4; run 127); on-wgrad is `on` with MXHOST_MX_CHAIN_WGRAD=1 (the
# chained wgrad, run 135).
n=0
for mode in ${MODES:-off on}; do
    n=$((n + 1))
    echo "== mxhost bench $n, MXHOST_MX_CHAIN=$mode"
    fused=0; [ "$mode" = on-fused ] && fused=1
    pair=1; [ "$mode" = on-unpaired ] && pair=0
    block=1; [ "$mode" = on-unblocked ] && block=0
    form=1; [ "$mode" = on-split ] && form=0
    partner=1; [ "$mode" = on-copies ] && partner=0
    wgrad=0; [ "$mode" = on-wgrad ] && wgrad=1
    MXHOST_MX_CHAIN=${mode%-*} MXHOST_MX_CHAIN_FUSED=$fused MXHOST_MX_CHAIN_PAIR=$pair MXHOST_MX_CHAIN_BLOCK=$block \
        MXHOST_MX_CHAIN_FORM=$form MXHOST_MX_CHAIN_PARTNER=$partner MXHOST_MX_CHAIN_WGRAD=$wgrad timeout 250 dist/mxhost bench --device cuda --shapes "$shapes" --reps "${REPS:-10}" \
        ${ONLY:+--only "$ONLY"} --warmup-ms "$W" --peers "$out/peer_bench.csv" --json "$out/bench-$n-$mode.json" >"$out/bench-$n-$mode.txt" 2>&1
    echo "rc=$?"
    # shape key, op, µs, × BF16 (the full rows are in the file)
    grep -E "^[a-d] .*(quantize|forward|dgrad|wgrad|step)" "$out/bench-$n-$mode.txt" |
        awk '{op=""; for (i=6; i<=NF-5; i++) op=op" "$i; printf "%s%-72.72s %8s %5s\n", $1, op, $(NF-4), $NF}'
done
# NCU=regex: ncu (clocks not locked) on the first two launches of the kernels matching it in
# one rep of `on` on shape NCU_SHAPE (default a), the fused quantizer on with NCU_FUSED=1; details
# in ncu.txt.
if [ -n "${NCU:-}" ] && command -v ncu >/dev/null; then
    echo "== ncu --kernel-name regex:$NCU"
    MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_FUSED=${NCU_FUSED:-0} timeout 300 ncu --clock-control none --kernel-name "regex:$NCU" \
        --launch-count "${NCU_COUNT:-2}" --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section InstructionStats --section Occupancy --section LaunchStats \
        dist/mxhost bench --device cuda --shapes "${NCU_SHAPE:-a}" --reps 1 --warmup-ms 0 >"$out/ncu.txt" 2>&1
    echo "rc=$?"
    grep -E "^  [a-z_0-9]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Executed Ipc Active|Achieved Occupancy|Registers Per" "$out/ncu.txt" | head -60
fi
if [ -n "${AB:-}" ] && [ -f dist/libmxbench.so ]; then
    echo "== chain.py --ab $AB (interleaved rounds)"
    cp dist/libmxbench.so plugin-mxfp8/cuda/bench/
    timeout 300 python3 plugin-mxfp8/cuda/bench/chain.py --shapes "${AB_SHAPES:-a,b,bd,c}" --rep 15 --skip-small \
        --ab "$AB" ${AB_BUILDS:+--ab-builds "$AB_BUILDS"} --dists "${AB_DISTS:-gauss-w0.7,gauss,gauss-w1.0}" >"$out/chain-ab.txt" 2>&1
    echo "rc=$?"; grep -E "^AB|FAIL" "$out/chain-ab.txt"
fi
