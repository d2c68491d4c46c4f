#!/usr/bin/env python3
"""What the L2 flush of the timing protocol costs a short, memory-bound kernel.

bench_peers.py and `mxhost bench` time every call after flushing L2 the way
triton.testing.do_bench does: `zero_()` of a 256 MB buffer, a *write*. That leaves up to
L2-size of dirty lines, which the timed kernel then has to write back to DRAM while it
runs. A 1 GiB copy hides that fixed cost; a 60 µs quantizer does not. This probe times
the backend's quantizers (flat 1×32 rows for X, the t32 TMA kernel for W 32×32 + Wᵀ) and
a plain copy of the same number of bytes under three protocols, in one process:
  write-flush   do_bench's: zero_() 256 MB, then the call (what the targets are measured with)
  read-flush    sum() over 256 MB (L2 left holding clean lines), then the call
  back-to-back  no flush (warm L2; the input may partly hit)
and prints µs and the share of the 2 GiB copy bandwidth (bench_peers.py's reference).
Usage (GPU machine, after run.sh has put libmxbench.so here): python3 flush_probe.py
"""
import os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (loads libmxbench.so)

FLUSH_BYTES = 256 << 20
REPS = 40


def time_call(fn, flush):
    """µs of one call of `fn` after `flush()` (or none), CUDA events around the call."""
    if flush is not None:
        flush()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3


def samples(fn, flush, n=REPS):
    """Sorted µs of `n` calls of `fn`, each after `flush()`, after one warm-up call."""
    fn(); torch.cuda.synchronize()
    return sorted(time_call(fn, flush) for _ in range(n))


def median(v):
    return sorted(v)[len(v) // 2]


def timed(fn, flush):
    """Median µs of `fn` over REPS calls, each after `flush()` (or none)."""
    return median(samples(fn, flush))


def ab(key, label, fa, fb, flush, rounds=60):
    """Interleaved A/B under `flush`: median of per-round A µs / B µs (> 1: B faster)."""
    fa(); fb(); torch.cuda.synchronize()
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(time_call(fa, flush)); tb.append(time_call(fb, flush))
    ratios = [a / b for a, b in zip(ta, tb)]
    print(f"{key:5s} A/B {label}: A {median(ta):.1f} µs, B {median(tb):.1f} µs, median A/B {median(ratios):.3f}", flush=True)


def main():
    cache = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    cache.zero_()
    protocols = {
        "write-flush": lambda: cache.zero_(),
        "read-flush": lambda: cache.sum(),
        "back-to-back": None,
    }
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    big2 = torch.empty_like(big)
    t_big = timed(lambda: big2.copy_(big), protocols["write-flush"])
    ref = 2 * big.numel() / (t_big * 1e-6) / 1e9
    del big, big2
    print(f"{torch.cuda.get_device_name()}: copy 1 GiB (read+write), write-flush: {t_big:.1f} µs = {ref:.0f} GB/s (the reference)")
    print(f"{'shape':5s} {'op':52s} {'MB moved':>9s} " + " ".join(f"{p:>22s}" for p in protocols))
    for key in ("a", "b", "c", "d"):
        E, Mg, K, N = bench.SHAPES[key]
        M = E * Mg
        X = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        W = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) * 0.05
        xq = bench.quantize(X, bench.ROWS, variant=2, tpc=0)
        fq = torch.empty_like(X)
        q = lambda v, t: (lambda: bench.quantize(X, bench.ROWS, variant=v, tpc=t))
        qw = lambda v: (lambda: bench.quantize(W, bench.TILE | bench.TILE_T, variant=v, tpc=0))
        fake = lambda launch: (lambda: bench.ck(launch(1, 0, bench.ptr(X), bench.ptr(fq), M * K // 32, 0, None), "fakequant rows"))
        xbytes = M * K * 3 + M * K // 32
        ops = [
            ("quantize X 1x32", [("flat (LDG)", q(2, 0)), ("flat, no scale stores (diagnostic)", q(15, 0)),
                                 ("flat, plain ld.global", q(16, 0)), ("flat, chunk pairs (16-byte stores)", q(17, 0)),
                                 ("bulk, 4 slots", q(12, 0))], xbytes),
            ("fake-quantize X 1x32 -> bf16", [("flat (LDG)", fake(bench.lib.mx_launch_fakequant_rows)),
                                              ("bulk", fake(bench.lib.mx_launch_fakequant_rows_bulk))], M * K * 4),
            ("quantize W 32x32 + T", [("t32", qw(10)), ("t32 row groups, W^T in 128-byte lines", qw(18)),
                                      ("t32 row groups, no W^T stores (diagnostic)", qw(19))],
             E * N * K * 4 + E * N * K // 512),
        ]
        w10, w18 = qw(10)(), qw(18)()
        if not all(torch.equal(w10[k], w18[k]) for k in w10):
            print(f"{key}: MISMATCH W 32x32 + T: variant 18 != t32", flush=True)
        del w10, w18
        ab(key, "quantize W 32x32 + T: t32 / row groups", qw(10), qw(18), protocols["write-flush"])
        for v, t in ((12, 0), (12, 6), (16, 0), (17, 0), (15, 0)):
            o = bench.quantize(X, bench.ROWS, variant=v, tpc=t)
            if not (torch.equal(o["qa"], xq["qa"]) and (v == 15 or torch.equal(o["sa"], xq["sa"]))):
                print(f"{key}: MISMATCH variant {v} (tpc {t}) != flat", flush=True)
        del xq
        for name, kernels, nbytes in ops:
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            for label, f in [(f"{name} [{k}]", fn) for k, fn in kernels] + [("copy, same bytes", lambda: dst.copy_(src))]:
                cells = []
                for p, fl in protocols.items():
                    t = timed(f, fl)
                    cells.append(f"{t:8.1f} µs {nbytes / (t * 1e-6) / 1e9 / ref * 100:5.1f} %")
                print(f"{key:5s} {label:52s} {nbytes / 1e6:9.1f} " + " ".join(f"{c:>22s}" for c in cells), flush=True)
            del src, dst
        del X, W, fq
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
