#!/usr/bin/env bash
# Runs mainloop_slices.cu (see there) with the SM clock sampled by nvidia-smi, and prints per
# variant TFLOP/s, the mean SM clock of its last 2 s and TFLOP/s per GHz (docs/perf.md run 83).
# On the GPU machine, from the repository root: bash plugin-mxfp8/cuda/bench/mainloop_slices.sh
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp}"
tmp="$(mktemp -d)"
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o "$tmp/ms" "$here/mainloop_slices.cu" || exit 1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 50 > "$out/slices_smi.csv" &
smi=$!
sleep 0.5
"$tmp/ms" | tee "$out/slices.txt"
kill $smi
python3 - "$out/slices.txt" "$out/slices_smi.csv" <<'PY'
import sys, re, datetime
rows = [l for l in open(sys.argv[1]) if "epoch" in l]
smi = []
for l in open(sys.argv[2]):
    f = [x.strip() for x in l.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        smi.append((t, float(f[1].split()[0]), float(f[2].split()[0])))
    except (ValueError, IndexError):
        pass
print("variant | TFLOP/s | SM MHz (last 2 s) | W | TFLOP/s per GHz")
for l in rows:
    tf = float(re.search(r"([\d.]+) TFLOP/s", l).group(1))
    t0, t1 = map(float, re.search(r"epoch ([\d.]+) ([\d.]+)", l).group(1, 2))
    s = [x for x in smi if t1 - 2.0 <= x[0] <= t1]
    mhz = sum(x[1] for x in s) / max(len(s), 1); w = sum(x[2] for x in s) / max(len(s), 1)
    print(f"{l.split(',')[0]} | {tf:.0f} | {mhz:.0f} | {w:.0f} | {tf / (mhz / 1000) if mhz else float('nan'):.0f}")
PY
