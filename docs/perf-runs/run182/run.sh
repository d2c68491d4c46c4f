#!/usr/bin/env bash
# Run 182 (docs/perf.md): where b's chained forward spends its fixed ~4.7 k cycles per tile
# (runs 178 and 181): ncu's source page (SASS, PC-sampled stalls per instruction) of the first
# 3-stage chained launch of b's GroupedLinear step (the forward), ranked by samples, so that
# the consumers' tile-end costs (the correction rounds' waits, the TCB slabs' named barriers,
# the epilogue's stores) separate from the gatherers' and the producer's waiting. Then ncu on
# c's quantize calls in the same step (the X/dY form kernel with wgrad values, the residual
# lists after it, the weight's pair kernel): c's X and dY run 2.6–2.8 µs per million elements
# against b's dY's 2.5 (run 180), and the pair kernel lost bandwidth when it began leaving
# bytes out (b: 2.4 → 2.1 TB/s, runs 179–180).
set -u
dev_out="${OUT:-}"
export OUT=out/run182
mkdir -p "$OUT"
pack() { if [ -n "$dev_out" ]; then tar czf "$dev_out/run182.tgz" -C "$OUT" .; fi; }
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv > "$OUT/card.txt" 2>&1; cat "$OUT/card.txt"
timeout 240 ncu --clock-control none --kernel-name "regex:mx_cgemm_e4m3e4m3_w2d_bf16_s3" --launch-count 1 \
    --section WarpStateStats --section SourceCounters --import-source yes -o "$OUT/fwd" \
    dist/mxhost bench --device cuda --shapes b --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
ncu -i "$OUT/fwd.ncu-rep" --page source --csv --print-source sass > "$OUT/sass.csv" 2>"$OUT/sass.err"
echo "source page rc=$? ($(wc -l < "$OUT/sass.csv") lines)"
python3 - "$OUT/sass.csv" <<'PY' | tee "$OUT/top.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
head = next((i for i, r in enumerate(rows) if any("Sampling" in c for c in r)), None)
if head is None:
    print("no stall-sampling column; first lines:", rows[:3]); sys.exit()
h = rows[head]
col = next(i for i, c in enumerate(h) if "Warp Stall Sampling (All" in c)
src = next((i for i, c in enumerate(h) if c.lower() in ("source", "sass")), 1)
num = lambda s: float((s or "0").replace(",", "") or 0)
body = [r for r in rows[head + 1:] if len(r) > col]
tot = sum(num(r[col]) for r in body) or 1
print(f"{len(body)} instructions, {tot:.0f} samples; the top 60 (share, cumulative, line, SASS):")
acc = 0
for i, r in sorted(enumerate(body), key=lambda t: -num(t[1][col]))[:60]:
    acc += num(r[col])
    print(f"{100 * num(r[col]) / tot:5.1f}% {100 * acc / tot:5.1f}% {i:5d} {r[src][:110]}")
PY
pack
timeout 200 ncu --clock-control none --kernel-name "regex:mx_quantize_rows_form_wv|mx_chain_lists|mx_quantize_pair" --launch-count 6 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    dist/mxhost bench --device cuda --shapes c --reps 1 --warmup-ms 0 --only "GroupedLinear with 32x32" > "$OUT/ncu-c-quant.txt" 2>&1
echo "ncu (c's quantizers) rc=$?"
grep -E "^  [a-z_0-9]+ \(|Duration|DRAM Throughput|Memory Throughput  .*Gbyte|Achieved Occupancy|Registers Per|Grid Size|Waves Per SM" "$OUT/ncu-c-quant.txt" | head -70
pack
