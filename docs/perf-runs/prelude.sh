# Sourced by the run scripts (docs/perf-runs/runNNN/run.sh) from the repository root:
# `source docs/perf-runs/prelude.sh runNNN` sets OUT=out/runNNN (the device's own $OUT kept in
# dev_out), PARTS from the environment or the script's default (PARTS_DEFAULT), and defines
# `has PART` (whether PARTS names it), `pack` (the run's folder as one tarball in the device's
# $OUT: a device call returns at most a few files) and `ab_report` (below).
run_name="$1"
dev_out="${OUT:-}"
export OUT="out/$run_name"
mkdir -p "$OUT"
PARTS="${PARTS:-${PARTS_DEFAULT:-}}"
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/$run_name.tgz" -C "$OUT" .; fi; }
# `ab_report RC` after a scripts/gpu-ab.sh call with OUT="$OUT/ab": its exit status, the
# selftest's last lines and failures, the summary table, and each bench log's step traces.
ab_report() {
    echo "ab rc=$1"; tail -3 "$OUT/ab/selftest.txt" 2>/dev/null; grep FAIL "$OUT/ab/selftest.txt" 2>/dev/null | head -5
    head -20 "$OUT/ab/summary.txt" 2>/dev/null
    local f
    for f in "$OUT"/ab/ab-*.txt; do
        echo "${f##*/}"; grep -o "step trace \[.*" "$f" | sed 's/GPU µs (host enqueue µs) //' | cut -c1-220
    done
}
# `selftest_modes MODE...`: the GPU selftest (`--quick`, poisoned outputs, CUDA required) under
# each MXHOST_MX_CHAIN mode given, into $OUT/selftest-MODE.txt (selftest-MODE-TAG.txt with
# SELFTEST_TAG set): its exit status, summary line and first failures.
selftest_modes() {
    local mode f
    for mode in "$@"; do
        f="$OUT/selftest-$mode${SELFTEST_TAG:+-$SELFTEST_TAG}.txt"
        MXHOST_MX_CHAIN=$mode MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 dist/mxhost selftest --device cuda --quick \
            > "$f" 2>&1
        echo "selftest $mode${SELFTEST_TAG:+ ($SELFTEST_TAG)} rc=$?"; grep -E "^mxhost selftest: [0-9]" "$f"; grep FAIL "$f" | cut -c1-220 | head -5
    done
}
# `step_ab ROUNDS TIMEOUT_S VARIANTS`: scripts/gpu-ab.sh on the GroupedLinear training step (its
# trace on) on SHAPES (default c,b,a) beside torch BF16, under MODE=auto, without a selftest,
# into $OUT/ab, then ab_report; ROUNDS, PEER_BUDGET_S (40), AB_TIMEOUT_S and WARM_ROUND from the
# environment override the script's defaults given here.
step_ab() {
    MXHOST_BENCH_STEP_TRACE=1 SELFTEST=0 SHAPES="${SHAPES:-c,b,a}" PEER_BUDGET_S=${PEER_BUDGET_S:-40} ROUNDS=${ROUNDS:-$1} MODE=auto \
        VARIANTS="$3" ONLY="GroupedLinear with 32x32" OUT="$OUT/ab" timeout "${AB_TIMEOUT_S:-$2}" bash scripts/gpu-ab.sh > "$OUT/ab.txt" 2>&1
    ab_report $?
}
