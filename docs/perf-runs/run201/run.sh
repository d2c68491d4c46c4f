#!/usr/bin/env bash
# Run 201 (docs/perf.md): the prefetching X/dY form kernel (MXHOST_MX_FORM_PREFETCH=1,
# mx_quantize_rows_form_wv_noq_pf_*) against the one-block build, in what device time is left:
# c's GroupedLinear step with its trace, default / prefetch / default / prefetch (the first run
# also compiles the kernels), then the selftest with the prefetching build. Every output is
# written as it comes, so a cut-short call still returns what ran.
set -u
o="${OUT:-out/run201}"; mkdir -p "$o"
step() {
    MXHOST_MX_FORM_PREFETCH=$2 MXHOST_BENCH_STEP_TRACE=1 MXHOST_MX_CHAIN=auto timeout 120 dist/mxhost bench --device cuda \
        --shapes c --only "GroupedLinear with 32x32" > "$o/step-$1.txt" 2>&1
    echo "$1 rc=$?"; grep -E "training step as GroupedLinear" "$o/step-$1.txt" | cut -c1-150
    grep -o "step trace \[.*" "$o/step-$1.txt" | sed 's/GPU µs (host enqueue µs) //' | cut -c1-200
}
nvidia-smi --query-gpu=name --format=csv,noheader
step 1-default 0; step 2-prefetch 1; step 3-default 0; step 4-prefetch 1
MXHOST_MX_FORM_PREFETCH=1 MXHOST_MX_CHAIN=auto MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 \
    dist/mxhost selftest --device cuda --quick > "$o/selftest-auto-prefetch.txt" 2>&1
echo "selftest rc=$?"; grep -E "^mxhost selftest: [0-9]" "$o/selftest-auto-prefetch.txt"; grep FAIL "$o/selftest-auto-prefetch.txt" | head -5
