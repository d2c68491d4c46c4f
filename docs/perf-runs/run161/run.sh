#!/usr/bin/env bash
# Run 161 (docs/perf.md): the default-path dgrad on the transposed copy read 150-250 µs slower
# third in a process (after the forward and re-laid rows) than alone in one (run 160), with
# equal kernels under ncu (runs 159-160). Which earlier work slows it, and is it the card's
# power state? 1. the transposed-copy row after each single earlier row, a and c; 2. the three
# rows with a 1500 ms settle per row instead of 300; 3. the three rows each after 3 s idle
# (--cooldown-ms 3000); SM clock, power and temperature sampled every 50 ms throughout
# (clocks.csv, with each step's start time in steps.txt). Default path.
set -u
dev_out="${OUT:-}"
o=out/run161; mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$o/card.txt"
export MXHOST_MX_CHAIN=off
FWD="forward X 1x32 · W 32x32 (pre"; RL="dgrad dY 1x32 · W 32x32 [E,N,K] (re"; WT="dgrad dY 1x32 · W 32x32 [E,K,N]"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 50 >"$o/clocks.csv" 2>/dev/null &
smi=$!
step() {  # label, then bench arguments
  local lab="$1"; shift
  echo "$(date +%H:%M:%S.%N) $lab" >>"$o/steps.txt"
  echo "== $lab" >>"$o/bench.txt"
  timeout 120 dist/mxhost bench --device cuda --reps 10 "$@" >>"$o/bench.txt" 2>&1
  grep -E "^[a-d] " "$o/bench.txt" | tail -n 6 >/dev/null
}
for i in 1 2; do
  step "WT alone $i" --shapes a,c --warmup-ms 300 --only "$WT"
  step "FWD then WT $i" --shapes a,c --warmup-ms 300 --only "$FWD,$WT"
  step "RL then WT $i" --shapes a,c --warmup-ms 300 --only "$RL,$WT"
done
step "all three, 1500 ms settle" --shapes a,b,c --warmup-ms 1500 --only "$FWD,$RL,$WT"
step "all three, 3 s idle first, 300 ms settle" --shapes a,c --warmup-ms 300 --cooldown-ms 3000 --only "$FWD,$RL,$WT"
step "all three, 300 ms settle (as the bench runs)" --shapes a,c --warmup-ms 300 --only "$FWD,$RL,$WT"
kill $smi 2>/dev/null
awk '/^== /{lab=$0} /^[a-d] E/{printf "%-50.50s %s\n", lab, substr($0,1,150)}' "$o/bench.txt"
if [ -n "$dev_out" ]; then tar czf "$dev_out/run161.tgz" -C "$o" .; fi
