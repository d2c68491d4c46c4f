#!/usr/bin/env bash
# Run 142 (docs/perf.md): is `on` with the gate memory slower than plain `on` on shape c's
# plain step (run 141: 3309–3352 against 3213–3221 µs)? One call from the repository root
# with dist/ built by scripts/dist.sh (carry ["dist"]):
#   1. a GEMM trace of three plain steps on c under `on` with the memory (every gate's verdict,
#      any GEMM the memory kept off the chained path);
#   2. scripts/gpu-ab.sh on c, both step rows, four rounds, the variants in the reverse order of
#      run 141's (plain `on` first, then `on` with the memory, then the default path).
set -u
out="${OUT:-out/run142}"
mkdir -p "$out"
echo "== trace, plain step on c, on + memory"
env MXHOST_MX_CHAIN=on MXHOST_MX_CHAIN_MEMORY=1 MXHOST_MX_GEMM_TRACE=1 timeout 70 dist/mxhost bench \
    --device cuda --shapes c --reps 3 --warmup-ms 0 --only "step: 3 GEMMs + all quantization (bf16" \
    >"$out/trace-step-c.txt" 2>&1
echo "rc=$?"
for what in "gate memory" "chained gate open" "chained gate closed"; do
    echo "$what: $(grep -c "$what" "$out/trace-step-c.txt")"
done
grep -o "chained gate [a-z]* ([0-9]* residuals[^)]*)" "$out/trace-step-c.txt" | sort | uniq -c
OUT="$out/ab" SELFTEST=0 SHAPES=c PEER_BUDGET_S=15 MODE=on ROUNDS=4 ONLY="step: 3" \
    VARIANTS="new new+MXHOST_MX_CHAIN_MEMORY=1 new+MXHOST_MX_CHAIN=off" bash scripts/gpu-ab.sh
cd "$out" && tar czf /tmp/run142.tgz ./* && rm -rf ./* && mv /tmp/run142.tgz ./run142.tgz
