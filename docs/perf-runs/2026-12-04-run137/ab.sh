#!/usr/bin/env bash
# run 137: selftest (always, VERIFY), peers, old/new plugin A/B under `on`, ncu of pair/form on c
set -u; O=$OUT
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee $O/card.txt
MXHOST_MX_CHAIN=always MXHOST_MX_CHAIN_VERIFY=1 MXHOST_POISON_OUTPUTS=1 MXHOST_REQUIRE_CUDA=1 timeout 150 dist/mxhost selftest --device cuda --quick > $O/selftest-always.txt 2>&1
echo rc=$?; grep -E "^mxhost selftest: [0-9]" $O/selftest-always.txt; grep FAIL $O/selftest-always.txt | head -5
OUT=$O timeout 120 python3 dist/bench_peers.py --shapes a,b,c --budget-s 60 --warmup 500 --rep 500 > $O/peers.txt 2>&1; echo peers rc=$?
ONLY="${ONLY:-quantize X 1x32 (bf16,W 32x32 + transposed,step: 3}"
for i in 1 2; do for v in old new; do
  if [ $v = old ]; then export MXHOST_PLUGIN_PATH=dist/old; else unset MXHOST_PLUGIN_PATH; fi
  MXHOST_MX_CHAIN=on timeout 100 dist/mxhost bench --device cuda --shapes a,b,c --reps 10 --only "$ONLY" --warmup-ms 300 \
    --peers $O/peer_bench.csv > $O/ab-$i-$v.txt 2>&1; echo "$i $v rc=$?"
  grep -E "^[abc] " $O/ab-$i-$v.txt | awk '{op=""; for (i=6; i<=NF-5; i++) op=op" "$i; printf "%s%-50.50s %8s %5s\n", $1, op, $(NF-4), $NF}'
done; done
unset MXHOST_PLUGIN_PATH
M=gpu__time_duration.sum,sm__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
for v in new old; do
  if [ $v = old ]; then export MXHOST_PLUGIN_PATH=dist/old; else unset MXHOST_PLUGIN_PATH; fi
  MXHOST_MX_CHAIN=on timeout 150 ncu --clock-control none --cache-control none --kernel-name "regex:mx_reencode_pair|mx_quantize_rows_form" \
    --launch-count 4 --metrics $M dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "quantize X 1x32 (bf16,W 32x32 + transposed" > $O/ncu-$v.txt 2>&1
  echo "ncu $v rc=$?"; grep -E "^  mx_|duration|inst_executed|warps_active|lts__|dram__" $O/ncu-$v.txt | head -24
done
