#!/usr/bin/env bash
# Is the "position effect" (rows measured late in a shape's sequence read slower,
# docs/perf.md runs 54, 72-73) the card's thermal state? Times one shape's rows twice, with
# and without `--cooldown-ms`, with nvidia-smi logging temperature, SM clock and power
# every 200 ms. GPU machine, after scripts/dist.sh here:
#   SHAPE=a COOLDOWN_MS=3000 bash scripts/position-probe.sh   (writes under $OUT; WARMUP_MS, default
#   0: no settle, unlike mxhost bench's own 1500 ms on a GPU, perf.md runs 159-161)
set -u
out="${OUT:-out}"
mkdir -p "$out"
shape="${SHAPE:-a}"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=timestamp,temperature.gpu,clocks.sm,power.draw --format=csv,noheader -lms 200 \
    >"$out/smi.csv" 2>/dev/null &
smi=$!
OUT="$out" timeout 150 python3 dist/bench_peers.py --shapes "$shape" --budget-s 40 >"$out/peers.txt" 2>&1
echo "peers rc=$?"
for cd in 0 "${COOLDOWN_MS:-3000}"; do
    echo "== mxhost bench --shapes $shape --cooldown-ms $cd (start $(date +%T.%N | cut -c1-12))"
    timeout 240 dist/mxhost bench --device cuda --shapes "$shape" --reps "${REPS:-20}" --cooldown-ms "$cd" \
        --warmup-ms "${WARMUP_MS:-0}" --peers "$out/peer_bench.csv" --json "$out/bench_cd$cd.json" 2>&1
    echo "== end $(date +%T.%N | cut -c1-12)"
done
kill "$smi" 2>/dev/null
