#!/usr/bin/env python3
"""One table from a gpu-ab.sh output folder: every bench row (shape, op) with each variant's µs
and × BF16 per round (ab-<round>-<variant>.txt), then every ncu-timed kernel with each variant's
mean duration and launch count (ncu-<variant>.txt). Usage: ab-summary.py DIR [VARIANT ...]
(default: the variants found, in the order of their first file)."""
import glob
import os
import re
import sys
from collections import OrderedDict, defaultdict

ROW = re.compile(r"^([a-d]) (E\d+ M\d+ K\d+ N\d+)\s+(.+?)\s{2,}([\d.]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")
KERNEL = re.compile(r"^  ([A-Za-z_0-9]+) \(")
DURATION = re.compile(r"^\s+gpu__time_duration\.sum\s+(\S+)\s+([\d.,]+)")


def bench(path):
    """{(shape, op): (µs, × BF16)} of one mxhost bench log."""
    rows = OrderedDict()
    for line in open(path, errors="replace"):
        m = ROW.match(line.rstrip("\n"))
        if m:
            rows[(m.group(1), m.group(3))] = (float(m.group(4)), m.group(8))
    return rows


def kernels(path):
    """{kernel: [µs, ...]} of one ncu log."""
    out = defaultdict(list)
    name = None
    for line in open(path, errors="replace"):
        m = KERNEL.match(line)
        if m:
            name = m.group(1)
            continue
        m = DURATION.match(line)
        if m and name:
            v = float(m.group(2).replace(",", ""))
            out[name].append(v / 1000.0 if m.group(1).startswith("n") else v * 1000.0 if m.group(1).startswith("m") else v)
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    d = sys.argv[1]
    files = sorted(glob.glob(os.path.join(d, "ab-*-*.txt")), key=os.path.getmtime)
    found = OrderedDict()
    for f in files:
        rnd, var = re.match(r"ab-(\d+)-(.+)\.txt$", os.path.basename(f)).groups()
        found.setdefault(var, {})[rnd] = bench(f)
    variants = sys.argv[2:] or list(found)
    keys = OrderedDict()
    for v in variants:
        for r in found.get(v, {}).values():
            for k in r:
                keys[k] = True
    if keys:
        print("bench rows, µs (× BF16) per round:")
        print("%-58s " % "row" + " ".join("%-26s" % v[:26] for v in variants))
        for k in keys:
            cells = []
            for v in variants:
                vals = [found[v][rnd].get(k) for rnd in sorted(found.get(v, {}))]
                cells.append(", ".join("%.1f%s" % (x[0], "" if x[1] == "-" else " (%s)" % x[1]) for x in vals if x))
            print("%-58s " % ("%s %s" % k)[:58] + " ".join("%-26s" % c for c in cells))
    ncu = OrderedDict()
    for v in variants:
        p = os.path.join(d, "ncu-%s.txt" % v)
        if os.path.exists(p):
            ncu[v] = kernels(p)
    if ncu:
        names = OrderedDict()
        for k in ncu.values():
            for n in k:
                names[n] = True
        print("\nncu, mean µs (launches):")
        print("%-44s " % "kernel" + " ".join("%-18s" % v[:18] for v in ncu))
        for n in names:
            cells = []
            for v in ncu:
                t = ncu[v].get(n, [])
                cells.append("%.1f (%d)" % (sum(t) / len(t), len(t)) if t else "-")
            print("%-44s " % n[:44] + " ".join("%-18s" % c for c in cells))


if __name__ == "__main__":
    main()
