#!/usr/bin/env bash
# Run 149 (docs/perf.md): ABI 1.5's wgrad values. X and dY quantized with their wgrad values
# from the same pass (mx_quantize_rows_form_wv_* under `on`, mx_quantize_rows_wv_bf16_* on
# the default path) and wgrad multiplying them as they are, against the step that reads X and
# dY again for wgrad's fake quantization, all in the plugin of dist/ (no old build: the
# variants are the plugin with the fused kernels, the same with MXHOST_MX_WGRAD_VALUES_FUSED=0
# (the values by a pass of their own) and the default path). From the repository root with
# dist/ built by scripts/dist.sh (carry ["dist"]), ~450 s:
#   1. the selftest on the default path with poisoned outputs (the rows_wv kernel), then under
#      `on` with VERIFY and poisoned outputs (gpu-ab.sh: the form_wv kernel);
#   2. scripts/gpu-ab.sh on a, b, c: quantize X with and without its values, wgrad on the
#      values and in-call, the default step and the step with wgrad values, two rounds;
#   3. ncu of the quantizers of c's "quantize X" rows per variant;
#   4. toy-moe (GroupedLinear now quantizes X and dY with their wgrad values on a GPU).
# Everything goes under out/run149 and comes back as one tarball in $OUT.
set -u
dev_out="${OUT:-}"
export OUT=out/run149
mkdir -p "$OUT"
echo "== selftest, default path (MXHOST_MX_CHAIN=off), poisoned outputs"
MXHOST_MX_CHAIN=off MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 \
    dist/mxhost selftest --device cuda --quick >"$OUT/selftest-off.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest-off.txt"; grep -E "FAIL|wgrad values" "$OUT/selftest-off.txt" | head -12
SELFTEST=on SHAPES=a,b,c PEER_BUDGET_S=40 ROUNDS=2 \
    VARIANTS="new new+MXHOST_MX_WGRAD_VALUES_FUSED=0 new+MXHOST_MX_CHAIN=off" \
    ONLY="quantize X 1x32,wgrad dY·X,step: 3 GEMMs + all quantization (bf16,with wgrad values" \
    NCU="mx_quantize_rows|mx_fakequant" NCU_COUNT=6 NCU_ONLY="quantize X 1x32" \
    bash scripts/gpu-ab.sh
grep -E "wgrad values" "$OUT/selftest.txt" | head -12
# guest-sdk's GroupedLinear quantizes X and dY with their wgrad values on a GPU: toy-moe's
# MXFP8-vs-BF16 training check under the default path and under `on`
for m in off on; do
    MXHOST_MX_CHAIN=$m timeout 120 dist/mxhost run dist/toy-moe.wasm --device cuda >"$OUT/toy-$m.txt" 2>&1
    echo "toy-moe ($m): rc=$?"; tail -3 "$OUT/toy-$m.txt"
done
if [ -n "$dev_out" ]; then tar czf "$dev_out/run149.tgz" -C "$OUT" .; fi
