#!/usr/bin/env bash
# An A/B of the mxfp8 plugin in dist/ against an older build of it in dist/old/ (copy its
# libmxhost_plugin_mxfp8.so there before `carry`), side by side in one device call, from the
# repository root with dist/ built by scripts/dist.sh; outputs under $OUT (or out/gpu-ab):
#   1. SELFTEST (default always; on, default or 0): the new plugin's selftest under that
#      MXHOST_MX_CHAIN mode, with VERIFY and poisoned outputs (and SELFTEST_ENV, e.g.
#      "MXHOST_MX_CHAIN_FORM4=1", in its environment);
#   2. bench_peers.py on SHAPES (default a,b,c; PEER_BUDGET_S seconds each, default 40, through
#      scripts/gpu-peers.sh), so the rows get their × BF16 column;
#   3. `mxhost bench --only "$ONLY"` under MXHOST_MX_CHAIN=$MODE (default on), the VARIANTS
#      (default "old new") interleaved, ROUNDS times (default 2): ab-<round>-<variant>.txt. A
#      variant is old, new, new+NAME=VALUE or old+NAME=VALUE (that plugin with that environment
#      variable, e.g. new+MXHOST_MX_CHAIN_QPAIR=0; new+MXHOST_MX_CHAIN=off runs under that mode
#      instead of MODE, for the default path side by side with the chained one; several
#      assignments join with '+', e.g. new+MXHOST_MX_CHAIN=off+MXHOST_BENCH_STEP_WGRAD_VALUES=1);
#      WARM_ROUND=1 first runs the first variant once into warm.txt, not compared: the first
#      bench call after the peers read every GEMM ~2 % slower in runs 194 and 196, whichever
#      build it ran;
#   4. with NCU=regex: ncu durations (and NCU_METRICS) of the matching kernels in one rep of
#      the NCU_ONLY rows (default ONLY) on NCU_SHAPE (default c), each variant in reverse
#      order: ncu-<variant>.txt;
#   5. summary.txt: every bench row and ncu-timed kernel per variant (scripts/ab-summary.py).
# Both sides run each row SETTLE_MS (default 1500) before timing it: past the power limiter's
# clamp, which a 300 ms settle timed a shape's third row inside (docs/perf.md runs 159-161).
# The device returns at most 8 files from its $OUT: a call with more variants or rounds should
# set OUT to a folder under out/ and PACK to a tarball path in the device's $OUT (runs 146–147
# lost their selftest logs and summaries to that limit; run 148 packs).
# docs/perf.md runs 132-133 and 137 are calls of this shape.
set -u
out="${OUT:-out/gpu-ab}"
mkdir -p "$out"
shapes="${SHAPES:-a,b,c}"
only="${ONLY:-quantize X 1x32 (bf16,W 32x32 + transposed,step: 3}"
mode="${MODE:-on}"
# the new plugin is dist/'s own (found beside mxhost); the old one through MXHOST_PLUGIN_PATH;
# a new+NAME=VALUE or old+NAME=VALUE variant exports NAME=VALUE (unset again for the next variant)
variants="${VARIANTS:-old new}"
# (only a call with an old variant needs the old build: VARIANTS="new ..." runs without it)
case " $variants" in *" old"*)
    if [ ! -f dist/old/libmxhost_plugin_mxfp8.so ]; then
        echo "dist/old/libmxhost_plugin_mxfp8.so is missing: put the build to compare against there"
        exit 2
    fi ;;
esac
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee "$out/card.txt"
extra=""
plugin() {
    local kv
    for kv in $extra; do unset "${kv%%=*}"; done
    extra=""
    case "$1" in old|old+*) export MXHOST_PLUGIN_PATH=dist/old ;; *) unset MXHOST_PLUGIN_PATH ;; esac
    # (several assignments join with '+': new+MXHOST_MX_CHAIN=off+NAME=VALUE)
    case "$1" in new+*=*|old+*=*) extra="$(printf %s "${1#*+}" | tr '+' ' ')" ;; esac
    vmode="$mode"
    for kv in $extra; do
        export "$kv"
        case "$kv" in MXHOST_MX_CHAIN=*) vmode="${kv#*=}" ;; esac
    done
}
if [ "${SELFTEST:-always}" != 0 ]; then
    st_mode="${SELFTEST:-always}"; [ "$st_mode" = default ] && st_mode=off
    echo "== selftest, MXHOST_MX_CHAIN=$st_mode"
    env ${SELFTEST_ENV:-} MXHOST_MX_CHAIN=$st_mode MXHOST_MX_CHAIN_VERIFY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 \
        dist/mxhost selftest --device cuda --quick >"$out/selftest.txt" 2>&1
    echo "rc=$?"; grep -E "^mxhost selftest: [0-9]" "$out/selftest.txt"; grep FAIL "$out/selftest.txt" | head -5
fi
echo "== bench_peers.py"
# (PEER_BUDGET_S per shape: scripts/gpu-peers.sh runs the shapes one by one)
bash scripts/gpu-peers.sh "$out" "$shapes" "${PEER_BUDGET_S:-40}" --warmup "${SETTLE_MS:-1500}" --rep 500
echo "peers rc=$?"
# `bench_rows FILE`: one round's bench of the current variant (after `plugin`) into FILE
bench_rows() {
    MXHOST_MX_CHAIN=$vmode timeout 150 dist/mxhost bench --device cuda --shapes "$shapes" --reps 10 --only "$only" \
        --warmup-ms "${SETTLE_MS:-1500}" --peers "$out/peer_bench.csv" >"$1" 2>&1
}
if [ "${WARM_ROUND:-0}" = 1 ]; then
    v="${variants%% *}"
    plugin "$v"
    bench_rows "$out/warm.txt"
    echo "== warm-up round ($v, not compared): rc=$?"
fi
for i in $(seq 1 "${ROUNDS:-2}"); do
    for v in $variants; do
        plugin "$v"
        lab=$(printf %s "$v" | tr -c 'A-Za-z0-9_-' '_')   # (file names the device returns)
        bench_rows "$out/ab-$i-$lab.txt"
        echo "== round $i, $v: rc=$?"
        grep -E "^[a-d] " "$out/ab-$i-$lab.txt" |
            awk '{op=""; for (i=6; i<=NF-5; i++) op=op" "$i; printf "%s%-50.50s %8s %5s\n", $1, op, $(NF-4), $NF}'
    done
done
if [ -n "${NCU:-}" ] && command -v ncu >/dev/null; then
    metrics="gpu__time_duration.sum${NCU_METRICS:+,$NCU_METRICS}"
    for v in $(echo $variants | tr ' ' '\n' | tac); do
        plugin "$v"
        lab=$(printf %s "$v" | tr -c 'A-Za-z0-9_-' '_')   # (file names the device returns)
        MXHOST_MX_CHAIN=$vmode timeout 200 ncu --clock-control none --cache-control none --kernel-name "regex:$NCU" \
            --launch-count "${NCU_COUNT:-6}" --metrics "$metrics" dist/mxhost bench --device cuda --shapes "${NCU_SHAPE:-c}" \
            --reps 1 --warmup-ms 0 --only "${NCU_ONLY:-$only}" >"$out/ncu-$lab.txt" 2>&1
        echo "== ncu, $v: rc=$?"
        grep -E "^  [a-z_0-9]+ \(|^    [a-z]" "$out/ncu-$lab.txt" | head -60
    done
fi
# one table of every row and kernel per variant (scripts/ab-summary.py)
labels=$(for v in $variants; do printf '%s ' "$(printf %s "$v" | tr -c 'A-Za-z0-9_-' '_')"; done)
python3 scripts/ab-summary.py "$out" $labels | tee "$out/summary.txt"
if [ -n "${PACK:-}" ]; then tar czf "$PACK" -C "$out" . && echo "packed into $PACK"; fi
