# Run 160: from nsys's cuda_gpu_trace CSV, each timed call of the bench (the work after one of
# the L2 flush's 256 MB memsets, up to the next): the idle time between the flush's end and the
# call's first kernel, the span to its last kernel's end, the busy time, the kernels in order.
import csv, glob, sys
o = sys.argv[1]
rows = list(csv.DictReader(open(glob.glob(f"{o}/stats_cuda_gpu_trace*.csv")[0])))
def col(r, name):
    for k in r:
        if k.startswith(name): return r[k]
    return ""
ops = sorted((int(col(r, "Start")), int(col(r, "Duration")), col(r, "Name"), col(r, "Bytes")) for r in rows)
flush = [i for i, x in enumerate(ops) if "memset" in x[2].lower() and x[3] and float(x[3] or 0) > 200e6]
print(f"{len(ops)} GPU records, {len(flush)} flushes; bytes column sample {ops[0][3]!r}")
for j, i in enumerate(flush):
    end = flush[j + 1] if j + 1 < len(flush) else len(ops)
    work = ops[i + 1:end]
    if not work: continue
    f_end = ops[i][0] + ops[i][1]
    first, last = work[0][0], max(x[0] + x[1] for x in work)
    busy = sum(x[1] for x in work)
    gaps = [work[k + 1][0] - (work[k][0] + work[k][1]) for k in range(len(work) - 1)]
    names = " ".join(f"{x[2][:18]}:{x[1] / 1000:.0f}" for x in work)
    print(f"call {j}: idle before first {(first - f_end) / 1000:.0f} us, span {(last - f_end) / 1000:.0f}, busy {busy / 1000:.0f}, "
          f"max inner gap {max(gaps, default=0) / 1000:.0f} | {names[:260]}")
