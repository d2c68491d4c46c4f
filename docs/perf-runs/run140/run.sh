#!/usr/bin/env bash
# Run 140 (docs/perf.md): one side-by-side bench of every row at the QPAIR-default commit, in
# the order that matters if the call is cut short (each step leaves its log under $OUT at once):
#   1. bench_peers.py (torch _grouped_mm BF16 and peers) on a, b, c;
#   2. `mxhost bench` default path, every row, × BF16 from 1.;
#   3. the default step's kernels on c (scripts/gpu-breakdown.sh, MODE=off);
#   4. `mxhost bench` under MXHOST_MX_CHAIN=on (forward, dgrad, step rows);
#   5. hello-gemm and a short toy-moe on CUDA.
# From the repository root with dist/ built by scripts/dist.sh (carry ["dist"]).
set -u
out="${OUT:-out/run140}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$out/card.txt"
OUT="$out" timeout 200 python3 dist/bench_peers.py --shapes a,b,c --budget-s "${PEER_BUDGET_S:-50}" \
    --warmup 500 --rep 500 >"$out/peers.txt" 2>&1
echo "peers rc=$?"
timeout 240 dist/mxhost bench --device cuda --shapes a,b,c --reps 10 --warmup-ms 500 \
    --peers "$out/peer_bench.csv" --json "$out/bench.json" >"$out/bench-default.txt" 2>&1
echo "bench rc=$?"; grep -E "^[a-c] " "$out/bench-default.txt" | cut -c1-170
OUT="$out/bd" MODE=off SHAPES=c bash scripts/gpu-breakdown.sh >"$out/breakdown-off-c.txt" 2>&1
echo "breakdown rc=$?"; tail -30 "$out/breakdown-off-c.txt"
MXHOST_MX_CHAIN=on timeout 200 dist/mxhost bench --device cuda --shapes a,b,c --reps 10 --warmup-ms 500 \
    --only "forward,dgrad,step" --peers "$out/peer_bench.csv" >"$out/bench-on.txt" 2>&1
echo "bench on rc=$?"; grep -E "^[a-c] " "$out/bench-on.txt" | cut -c1-170
timeout 60 dist/mxhost run dist/hello-gemm.wasm --device cuda >"$out/hello.txt" 2>&1; echo "hello rc=$?"
timeout 90 dist/mxhost run dist/toy-moe.wasm --device cuda --out /tmp/toy -- --steps 30 >"$out/toy.txt" 2>&1
echo "toy rc=$?"; tail -6 "$out/toy.txt"
cd "$out" && tar czf /tmp/run140.tgz ./* && rm -rf ./* && mv /tmp/run140.tgz ./run140.tgz
