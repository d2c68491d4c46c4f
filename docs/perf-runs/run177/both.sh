#!/usr/bin/env bash
# Runs 177 and 178 in one device call (machine starts were scarce on 2026-12-07): run 177 whole,
# then run 178 with what is left of a 590 s call (its ncu step's timeout cut to fit; skipped
# when under 120 s remain).
set -u
start=$(date +%s)
bash docs/perf-runs/run177/run.sh
left=$((590 - ($(date +%s) - start)))
echo "== run 178 with ${left} s left"
if [ "$left" -gt 120 ]; then NCU_TIMEOUT=$((left - 70)) bash docs/perf-runs/run178/run.sh; fi
