#!/usr/bin/env bash
# Run 170 (docs/perf.md): MXHOST_MX_CHAIN's new default `auto` (ABI 1.6 `for_gemm`): annexes only
# for tensors quantized for a GEMM, the chained GEMM when both operands have one.
# 1. the selftest with nothing set (poisoned outputs, GEMM trace: which kernel computed each);
# 2. gpu-ab.sh: `auto` (nothing set), `off` and `on` interleaved, one round, a, b, c, settled;
# 3. toy-moe and hello-gemm with nothing set.
# dist/ from scripts/dist.sh; one tarball, rewritten after each step.
set -u
dev_out="${OUT:-}"
export OUT=out/run170
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run170.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
unset MXHOST_MX_CHAIN
MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 MXHOST_MX_GEMM_TRACE=1 timeout 200 dist/mxhost selftest --device cuda --quick > "$OUT/selftest.txt" 2>&1
echo "selftest rc=$?"; grep -E "^mxhost selftest: [0-9]" "$OUT/selftest.txt"; grep -E "FAIL" "$OUT/selftest.txt" | head -5
echo "chained computed: $(grep -c 'chained GEMM computed' "$OUT/selftest.txt"), per-k32 after a closed gate: $(grep -c 'per-k32 kernel computed' "$OUT/selftest.txt")"
pack
SELFTEST=0 SHAPES=a,b,c PEER_BUDGET_S=120 ROUNDS=1 MODE=auto VARIANTS="new new+MXHOST_MX_CHAIN=off new+MXHOST_MX_CHAIN=on" \
  ONLY="quantize X 1x32 (bf16→e4m3),W 32x32 + transposed,forward X 1x32 · W 32x32 (pre-quantized),[E,K,N] (transposed copy),step: 3,GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 420 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; cat "$OUT/ab/summary.txt" 2>/dev/null | head -60
pack
for g in toy-moe hello-gemm; do
    timeout 60 dist/mxhost run dist/$g.wasm --device cuda > "$OUT/$g.txt" 2>&1; echo "$g rc=$?"; tail -3 "$OUT/$g.txt"
done
pack
