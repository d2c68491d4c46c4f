#!/usr/bin/env bash
# Where one training step's time goes, kernel by kernel, on a GPU machine without Nsight Systems:
# ncu times every kernel of `mxhost bench --only "$ONLY" --reps 1` (default: the default
# recipe's step) with caches and clocks left as the stream leaves them, and
# scripts/ncu-breakdown.py sums the durations per call of the step (quantize X, W, dY, forward,
# dgrad, wgrad) and per kernel. ncu serializes the launches, so the sum leaves out the gaps
# between kernels; the bench's own µs for the same row is printed beside it.
# From the repository root with dist/ built by scripts/dist.sh; outputs under $OUT (or
# out/gpu-breakdown). SHAPES (default a,b,c), MODE (MXHOST_MX_CHAIN, default on), WGRAD
# (MXHOST_MX_CHAIN_WGRAD, default 0), TAG (names the CSV files, default step).
set -u
out="${OUT:-out/gpu-breakdown}"
mkdir -p "$out"
only="${ONLY:-step: 3}"
for s in $(echo "${SHAPES:-a,b,c}" | tr , ' '); do
    f="$out/ncu-${TAG:-step}-${MODE:-on}-w${WGRAD:-0}-$s.csv"
    echo "== shape $s, MXHOST_MX_CHAIN=${MODE:-on} MXHOST_MX_CHAIN_WGRAD=${WGRAD:-0}, rows matching \"$only\""
    MXHOST_MX_CHAIN="${MODE:-on}" MXHOST_MX_CHAIN_WGRAD="${WGRAD:-0}" timeout 300 ncu --csv --clock-control none \
        --cache-control none --metrics gpu__time_duration.sum \
        dist/mxhost bench --device cuda --shapes "$s" --reps 1 --warmup-ms 0 --only "$only" >"$f" 2>"$f.err"
    echo "rc=$?"
    grep -E "^$s " "$f" | awk '{print "bench row:", $0}'
    python3 scripts/ncu-breakdown.py "$f"
done
