#!/usr/bin/env bash
# Run 162 (docs/perf.md): every row of `mxhost bench` on a, b, c on both paths (default and
# MXHOST_MX_CHAIN=on) beside bench_peers.py, all timed with the 1500 ms settle of runs 159-161,
# for one table of where the targets stand; first the default-path selftest with poisoned
# outputs (4702bcb's kernels). From the repository root with dist/ built by scripts/dist.sh
# (carry ["dist"]); one tarball back in $OUT.
set -u
dev_out="${OUT:-}"
o=out/run162; mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$o/card.txt"
echo "== selftest (default path)"
MXHOST_MX_CHAIN=off MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 dist/mxhost selftest --device cuda --quick >"$o/selftest.txt" 2>&1
echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$o/selftest.txt"; grep FAIL "$o/selftest.txt" | head -5
echo "== peers"
OUT="$o" timeout 240 python3 dist/bench_peers.py --shapes a,b,c --budget-s 200 --warmup 1500 --rep 500 >"$o/peers.txt" 2>&1; echo "rc=$?"
for mode in off on; do
  echo "== bench, MXHOST_MX_CHAIN=$mode"
  MXHOST_MX_CHAIN=$mode timeout 280 dist/mxhost bench --device cuda --shapes a,b,c --reps 10 --warmup-ms 1500 \
     --peers "$o/peer_bench.csv" --json "$o/bench-$mode.json" >"$o/bench-$mode.txt" 2>&1; echo "rc=$?"
  grep -E "^[a-d] " "$o/bench-$mode.txt" | cut -c1-150
done
if [ -n "$dev_out" ]; then tar czf "$dev_out/run162.tgz" -C "$o" .; fi
