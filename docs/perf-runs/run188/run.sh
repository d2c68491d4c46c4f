#!/usr/bin/env bash
# (Ran 2026-12-07 as run 188, results in docs/perf.md: no change; the register-A slabs were taken out after it.)
# Run 188 (docs/perf.md): the B_res corrections' slabs with A from registers and Q^T written by
# the gatherers (TCQ, the new default of the 3-stage chained builds) against the run-111 form
# (each consumer warpgroup writes its P and Q^T to shared memory, three named barriers per slab;
# the -DMXC_TCB_SMEM_P build), on a, b and c: forward, dgrad and the GroupedLinear step with its
# trace, two interleaved rounds, side by side with torch BF16; first the selftest under `always`
# (VERIFY, poisoned outputs: the B residual-carried cases need the slabs right).
# PARTS=ab (default) or PARTS=ncu (run 187's profile of c's quantizers, appended).
set -u
PARTS_DEFAULT="ab" source docs/perf-runs/prelude.sh run188
if has ab; then
MXHOST_BENCH_STEP_TRACE=1 SELFTEST=always SHAPES="${SHAPES:-a,b,c}" PEER_BUDGET_S=60 ROUNDS=2 MODE=auto \
  VARIANTS="${VARIANTS:-new new+MXHOST_NVRTC_DEFINES=-DMXC_TCB_SMEM_P}" \
  ONLY="forward X 1x32 · W 32x32 (pre-quantized),[E,K,N] (transposed copy),GroupedLinear with 32x32" \
  OUT="$OUT/ab" timeout 540 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
ab_report $?
# the chained wgrad's slabs too (opt-in MXHOST_MX_CHAIN_WGRAD=1; the same gatherer and slab code)
MXHOST_MX_CHAIN=always MXHOST_MX_CHAIN_WGRAD=1 MXHOST_MX_CHAIN_VERIFY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 \
  timeout 150 dist/mxhost selftest --device cuda --quick > "$OUT/selftest-wgrad.txt" 2>&1
echo "selftest (chained wgrad) rc=$?"; tail -2 "$OUT/selftest-wgrad.txt"; grep FAIL "$OUT/selftest-wgrad.txt" | head -5
pack
fi
if has ncu; then
OUT="${dev_out:-$OUT}" bash docs/perf-runs/run187/run.sh
fi
