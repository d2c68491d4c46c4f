#!/usr/bin/env bash
# bench_peers.py (dist/, copied from ../shared/anchors by scripts/dist.sh) once per shape, so
# that every shape gets its own time budget: with one call over a,b,c the budget is spent in
# order and the last shape's torch rows read "SKIP (time budget)" (docs/perf.md runs 188–191
# lost c's that way). GPU machine, repository root:
#   bash scripts/gpu-peers.sh OUT_DIR SHAPES BUDGET_PER_SHAPE_S [bench_peers.py args...]
# writes OUT_DIR/peer_bench.csv (the shapes' CSVs, one header; what `mxhost bench --peers`
# reads) and OUT_DIR/peers.txt (their logs); each call may overrun its budget by its last
# method, so each is cut at the budget + 90 s.
set -u
out="$1" shapes="$2" budget="$3"
shift 3
mkdir -p "$out"
: >"$out/peers.txt"
csv="$out/peer_bench.csv"
rm -f "$csv"
rc=0
for s in ${shapes//,/ }; do
    part="$out/peers-$s"
    mkdir -p "$part"
    OUT="$part" timeout $((budget + 90)) python3 dist/bench_peers.py --shapes "$s" --budget-s "$budget" "$@" \
        >>"$out/peers.txt" 2>&1 || rc=$?
    if [ -f "$part/peer_bench.csv" ]; then
        if [ -f "$csv" ]; then tail -n +2 "$part/peer_bench.csv" >>"$csv"; else cp "$part/peer_bench.csv" "$csv"; fi
    fi
    rm -rf "$part"
done
exit "$rc"
