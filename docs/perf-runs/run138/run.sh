#!/usr/bin/env bash
# Run 138 (docs/perf.md, "Run 138 — revised call and predictions") in three device calls of under
# 10 minutes each, from the repository root with dist/ built at the run's commit and db6471a's
# plugin in dist/old/ (carry ["dist"]):
#   bash docs/perf-runs/run138/run.sh 1   selftests (default; always + VERIFY + QPAIR + FORM4), ncu
#   bash docs/perf-runs/run138/run.sh 2   bench_peers.py and the A/B bench, two rounds (with both
#                                         plugins under MXHOST_MX_CHAIN=off too: part 4's question
#                                         on the step, and the default path beside the chained one)
#   bash docs/perf-runs/run138/run.sh 3   the L2 breakdown (plain, then QPAIR's kernel)
#   bash docs/perf-runs/run138/run.sh 4   the default path's forward and dgrad, old vs new (the
#                                         warp-synchronised stage releases, 2026-12-05; part 2's
#                                         off variants answer it for the step: optional)
# Each call ends with its outputs in one tarball under $OUT (the device returns 8 files).
set -u
out="${OUT:-out/run138}"
mkdir -p "$out"
variants="old new new+MXHOST_MX_CHAIN_QPAIR=1 new+MXHOST_MX_CHAIN_FORM4=1"
case "${1:-}" in
1)
    echo "== default selftest"
    MXHOST_REQUIRE_CUDA=1 timeout 200 dist/mxhost selftest --device cuda --quick >"$out/selftest-default.txt" 2>&1
    echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-default.txt"; grep FAIL "$out/selftest-default.txt" | head -5
    OUT="$out" SELFTEST=always SELFTEST_ENV="MXHOST_MX_CHAIN_QPAIR=1 MXHOST_MX_CHAIN_FORM4=1" ROUNDS=0 \
        PEER_BUDGET_S=5 VARIANTS="$variants" \
        NCU="mx_scales_to_f32|mx_reencode_pair|mx_quantize_pair|mx_quantize_t32l|mx_chain_lists|mx_quantize_rows_form" \
        NCU_COUNT=14 NCU_ONLY="step: 3" bash scripts/gpu-ab.sh
    ;;
2)
    OUT="$out" SELFTEST=0 VARIANTS="$variants old+MXHOST_MX_CHAIN=off new+MXHOST_MX_CHAIN=off" ONLY="quantize X 1x32 (bf16,W 32x32 + transposed,step: 3" \
        bash scripts/gpu-ab.sh
    ;;
3)
    OUT="$out/plain" bash scripts/gpu-ncu-l2.sh
    OUT="$out/qpair" MXHOST_MX_CHAIN_QPAIR=1 MXHOST_MX_CHAIN_FORM4=1 \
        KERNELS="mx_quantize_pair|mx_quantize_rows_form" bash scripts/gpu-ncu-l2.sh
    ;;
4)
    OUT="$out" SELFTEST=0 MODE=off VARIANTS="old new" SHAPES=c ROUNDS=3 \
        ONLY="forward X 1x32 · W 32x32 (pre-quantized),(transposed copy)" \
        bash scripts/gpu-ab.sh
    ;;
*)
    echo "usage: $0 1|2|3|4"; exit 2 ;;
esac
cd "$out" && tar czf /tmp/run138-part.tgz ./* && rm -rf ./* && mv /tmp/run138-part.tgz "./run138-part${1}.tgz"
ls -la
