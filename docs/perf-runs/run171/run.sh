#!/usr/bin/env bash
# Run 171 (docs/perf.md): after run 170. 1. toy-moe with nothing set (run 170's 60 s limit cut it:
# it takes ~50 s); 2. which kernel computes a's default step under `auto` (GEMM trace);
# 3. `auto` against `on` on a's step rows, two rounds interleaved (run 170's a read 5 % apart on
# the plain step with one round).
set -u
dev_out="${OUT:-}"
export OUT=out/run171
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run171.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
unset MXHOST_MX_CHAIN
timeout 150 dist/mxhost run dist/toy-moe.wasm --device cuda > "$OUT/toy-moe.txt" 2>&1; echo "toy-moe rc=$?"; tail -2 "$OUT/toy-moe.txt"
pack
MXHOST_MX_GEMM_TRACE=1 timeout 90 dist/mxhost bench --device cuda --shapes a --warmup-ms 100 --reps 1 --only "(bf16 in)" > "$OUT/trace.txt" 2>&1
echo "trace rc=$?"; grep -E "gate (open|closed)|not taken" "$OUT/trace.txt" | sort | uniq -c | cut -c1-200 | head
pack
SELFTEST=0 SHAPES=a PEER_BUDGET_S=60 ROUNDS=2 MODE=auto VARIANTS="new new+MXHOST_MX_CHAIN=on" \
  ONLY="step: 3,GroupedLinear with 32x32" OUT="$OUT/ab" timeout 300 bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$?"; cat "$OUT/ab/summary.txt" 2>/dev/null | head -20
pack
