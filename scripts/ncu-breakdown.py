#!/usr/bin/env python3
"""Per-kernel durations of one call of a bench row from ncu's CSV (scripts/gpu-breakdown.sh).

The bench calls the row's closure 2 times to warm up and `--reps` (1) times timed, between the
shape's own setup launches (which run whatever --only says), so the log holds the call's kernel
sequence three times in a row; this prints the last repetition in launch order with each kernel's µs and the running sum, then the
total per kernel name. Memsets (the L2 flush) are left out."""
import csv
import sys
from collections import OrderedDict


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    out = []
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"]
        if "memset" in name.lower():
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = v / 1000.0 if unit.startswith("n") else v if unit.startswith("u") else v * 1000.0
        out.append((name, us))
    return out


def call_span(names, reps=3):
    """(start, k) of the longest k-long sequence that occurs `reps` times in a row: the call's
    kernels (the longest, so that repeats inside one call do not pass for it; the first place it occurs,
    so that it starts with the call's first kernel); start is the last repetition's."""
    n = len(names)
    for k in range(n // reps, 0, -1):
        for i in range(n - reps * k + 1):
            if all(names[i + j] == names[i + j % k] for j in range(reps * k)):
                return i + (reps - 1) * k, k
    return 0, n


def short(name, width=78):
    base = name.split("(")[0]
    return base if len(base) <= width else base[: width - 1] + "…"


def main():
    ks = rows(sys.argv[1])
    if not ks:
        print("no kernels in", sys.argv[1])
        return
    start, k = call_span([n for n, _ in ks])
    last = ks[start : start + k]
    print(f"{len(ks)} kernels, the call's {k} (the last of three repetitions):")
    run = 0.0
    for name, us in last:
        run += us
        print(f"  {us:9.1f} {run:9.1f}  {short(name)}")
    tot = OrderedDict()
    for name, us in last:
        tot[short(name)] = tot.get(short(name), 0.0) + us
    print("per kernel:")
    for name, us in sorted(tot.items(), key=lambda x: -x[1]):
        print(f"  {us:9.1f}  {name}")
    print(f"sum of kernel durations: {run:.1f} µs")


if __name__ == "__main__":
    main()
