#!/usr/bin/env bash
# Run 139 (docs/perf.md): what run 138's part 1 and part 3 were for, without the old plugin (its
# A/B rounds ran in part 2), in one device call from the repository root with dist/ built by
# scripts/dist.sh (carry ["dist"]):
#   1. the default selftest, then the selftest under MXHOST_MX_CHAIN=always with VERIFY, poisoned
#      outputs and MXHOST_MX_CHAIN_QPAIR=1 (the one-launch weight quantizer, checked against the
#      tile quantizer and prepare_b on every call), both with MXHOST_REQUIRE_CUDA=1;
#   2. ncu durations of the step's small launches and quantize kernels on c under `on`, with and
#      without QPAIR (run 138's item 1: the lists at one wave);
#   3. the L2 breakdown of the quantize kernels (scripts/gpu-ncu-l2.sh), plain and with QPAIR.
# Everything ends in one tarball under $OUT.
set -u
out="${OUT:-out/run139}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$out/card.txt"
echo "== default selftest"
MXHOST_REQUIRE_CUDA=1 timeout 200 dist/mxhost selftest --device cuda --quick >"$out/selftest-default.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-default.txt"; grep FAIL "$out/selftest-default.txt" | head -5
echo "== selftest, always + VERIFY + poison + QPAIR"
MXHOST_MX_CHAIN=always MXHOST_MX_CHAIN_VERIFY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_MX_CHAIN_QPAIR=1 MXHOST_REQUIRE_CUDA=1 \
    timeout 200 dist/mxhost selftest --device cuda --quick >"$out/selftest-always-qpair.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest-always-qpair.txt"; grep FAIL "$out/selftest-always-qpair.txt" | head -5
kernels="mx_scales_to_f32|mx_reencode_pair|mx_quantize_pair|mx_quantize_t32l|mx_chain_lists|mx_quantize_rows_form"
for q in 0 1; do
    MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_QPAIR=$q timeout 150 ncu --clock-control none --cache-control none \
        --kernel-name "regex:$kernels" --launch-count 14 --metrics gpu__time_duration.sum \
        dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "step: 3" >"$out/ncu-c-qpair$q.txt" 2>&1
    echo "== ncu c, QPAIR=$q: rc=$?"
    grep -E "^  [a-z_0-9]+ \(|gpu__time_duration" "$out/ncu-c-qpair$q.txt" | paste - - |
        awk '{print $1, $NF}' | head -30
done
OUT="$out/l2-plain" bash scripts/gpu-ncu-l2.sh
OUT="$out/l2-qpair" MXHOST_MX_CHAIN_QPAIR=1 KERNELS="mx_quantize_pair|mx_quantize_rows_form" bash scripts/gpu-ncu-l2.sh
cd "$out" && tar czf /tmp/run139.tgz ./* && rm -rf ./* && mv /tmp/run139.tgz ./run139.tgz
ls -la
