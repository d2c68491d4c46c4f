#!/usr/bin/env bash
# Run 172 (docs/perf.md): hello-gemm's new rows on operands quantized for a GEMM, on the GPU with
# nothing set (GEMM trace: which kernel computed them). (The selftest is run 170's: device time
# was short after refused starts.)
set -u
dev_out="${OUT:-}"
export OUT=out/run172
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run172.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
unset MXHOST_MX_CHAIN
MXHOST_MX_GEMM_TRACE=1 timeout 120 dist/mxhost run dist/hello-gemm.wasm --device cuda > "$OUT/hello-gemm.txt" 2>&1
echo "hello-gemm rc=$?"; grep -E "for a GEMM|SNR gates|gate (open|closed)" "$OUT/hello-gemm.txt" | cut -c1-160
pack
