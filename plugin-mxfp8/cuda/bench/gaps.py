"""Where the GPU idles inside timed calls: reads an `nsys export --type sqlite` trace of
`mxhost bench`, splits it at the 256 MB L2-flush memsets (one segment = one timed call),
groups segments by their kernel sequence and prints, per group, the median span (first
kernel start to last kernel end), GPU busy time (union of kernels and memsets), the idle
time inside the span, the largest gap and where it sits.
Usage: python3 gaps.py trace.sqlite [--min-kernels N]"""
import sqlite3, sys, statistics
from collections import defaultdict

db = sqlite3.connect(sys.argv[1])
tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
    sys.exit(f"no kernel table; tables: {tables}")
min_k = int(sys.argv[sys.argv.index("--min-kernels") + 1]) if "--min-kernels" in sys.argv else 2
names = dict(db.execute("select id, value from StringIds"))
ev = [(s, e, names.get(n, "?")) for s, e, n in db.execute("select start, end, shortName from CUPTI_ACTIVITY_KIND_KERNEL")]
try:
    ms = [(s, e, b) for s, e, b in db.execute("select start, end, bytes from CUPTI_ACTIVITY_KIND_MEMSET")]
except sqlite3.OperationalError:
    ms = []
flush = sorted(s for s, e, b in ms if b >= 200 << 20)
small = [(s, e, "memset") for s, e, b in ms if b < 200 << 20]
ev = sorted(ev + small)
segs = defaultdict(list)
fi = 0
cur = []
bounds = flush + [float("inf")]
out = []
j = 0
for b in bounds:
    seg = []
    while j < len(ev) and ev[j][0] < b:
        seg.append(ev[j]); j += 1
    out.append(seg)
groups = defaultdict(list)
for seg in out[1:]:
    if len([x for x in seg if x[2] != "memset"]) < min_k:
        continue
    sig = tuple(x[2][:28] for x in seg)
    span = seg[-1][1] - seg[0][0]
    busy, last_end, gmax, gpos = 0, seg[0][0], 0, ""
    for i, (s, e, n) in enumerate(seg):
        if s > last_end:
            if s - last_end > gmax:
                gmax, gpos = s - last_end, f"before #{i} {n[:40]}"
            busy += e - s
        else:
            busy += max(0, e - last_end)
        last_end = max(last_end, e)
    groups[sig].append((span, busy, gmax, gpos))
print(f"{'kernels':>7} {'calls':>5} {'span us':>9} {'busy us':>9} {'idle us':>8} {'max gap us':>10}  largest gap / sequence")
for sig, v in sorted(groups.items(), key=lambda kv: -statistics.median(x[0] for x in kv[1])):
    sp = statistics.median(x[0] for x in v) / 1e3
    bu = statistics.median(x[1] for x in v) / 1e3
    g = max(v, key=lambda x: x[2])
    print(f"{len(sig):7d} {len(v):5d} {sp:9.1f} {bu:9.1f} {sp - bu:8.1f} {g[2] / 1e3:10.1f}  {g[3]}")
    print("        " + " > ".join(dict.fromkeys(sig)))
