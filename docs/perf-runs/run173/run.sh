#!/usr/bin/env bash
# Run 173 (docs/perf.md): X's and dY's MX bytes on demand (plugin ABI 1.7).
# (1) the selftest with nothing set (auto) and under `on` without VERIFY (every quantize call
#     with an annex then leaves bytes out; the selftest reads them through fill_bytes and
#     compares them with the CPU's), poisoned outputs, GEMM trace; hello-gemm with nothing set
#     (run 172's rows "for a GEMM");
# (2) the step rows, bytes on demand (the default) against MXHOST_MX_CHAIN_NOQ=0 (every byte
#     written), interleaved, two rounds, a, b, c, settled;
# (3) ncu durations of the form kernels in b's step with wgrad values, both variants.
set -u
dev_out="${OUT:-}"
export OUT=out/run173
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run173.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
for m in auto on; do
    MXHOST_MX_CHAIN=$m MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 200 dist/mxhost selftest --device cuda --quick > "$OUT/selftest-$m.txt" 2>&1
    echo "selftest $m rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest-$m.txt"; grep -E "FAIL" "$OUT/selftest-$m.txt" | head -5
    echo "chained computed: $(grep -c 'chained GEMM computed' "$OUT/selftest-$m.txt"), per-k32 after a closed gate: $(grep -c 'per-k32 kernel computed' "$OUT/selftest-$m.txt")"
done
unset MXHOST_MX_CHAIN
MXHOST_MX_GEMM_TRACE=1 timeout 120 dist/mxhost run dist/hello-gemm.wasm --device cuda > "$OUT/hello-gemm.txt" 2>&1
echo "hello-gemm rc=$?"; grep -E "for a GEMM|SNR gates|gate (open|closed)" "$OUT/hello-gemm.txt" | cut -c1-160 | head -12
pack
SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=100 ROUNDS=2 MODE=auto VARIANTS="new new+MXHOST_MX_CHAIN_NOQ=0" \
  ONLY="step: 3,GroupedLinear with 32x32" \
  NCU='form' NCU_SHAPE=b NCU_ONLY="X and dY with wgrad values" \
  OUT="$OUT/ab" timeout 330 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; cat "$OUT/ab/summary.txt" 2>/dev/null | head -70
pack
