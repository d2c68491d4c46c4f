#!/usr/bin/env bash
# Run mxhost's fuzz targets one after another (never in parallel), each for SECONDS.
#
#   fuzz/run.sh [SECONDS] [TARGET...]        default: 90 s, all four targets
#
# Stable rustc: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its nightly-only flags
# (-Zsanitizer=address). One libFuzzer job (-jobs=1), one rayon thread. Seeds are read
# from fuzz/corpus/<target>/ (committed); new inputs go to fuzz/corpus-run/<target>/,
# crashes to fuzz/artifacts/<target>/ (both git-ignored), logs to fuzz/logs/.
# Set MXHOST_FUZZ_SKIP_KNOWN=all (or a list of names) to step over the findings kept in
# fuzz/artifacts-found/ (see its README.md).
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-90}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(validate_gemm validate_quantize quantizer routing_plan)
export RUSTC_BOOTSTRAP=1 RAYON_NUM_THREADS=1
mkdir -p logs
cargo fuzz build --fuzz-dir . -a
for t in "${targets[@]}"; do
    mkdir -p "corpus-run/$t"
    echo "== $t: ${secs}s"
    rc=0
    cargo fuzz run --fuzz-dir . -a "$t" "corpus-run/$t" "corpus/$t" -- \
        -jobs=1 -max_total_time="$secs" -print_final_stats=1 >"logs/$t.out" 2>&1 || rc=$?
    # libFuzzer writes the job's own log to fuzz-0.log in the working directory.
    [ -f fuzz-0.log ] && mv fuzz-0.log "logs/$t.log"
    grep -hE "^Done|stat::number_of_executed_units|stat::average_exec_per_sec|SUMMARY|panicked at" \
        "logs/$t.log" "logs/$t.out" 2>/dev/null | sort -u || true
    echo "   exit $rc; corpus-run/$t: $(ls "corpus-run/$t" | wc -l) files; artifacts: $(ls "artifacts/$t" 2>/dev/null | wc -l)"
done
