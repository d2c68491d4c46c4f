#!/usr/bin/env python3
"""W 32x32 + W^T: the tile-loop kernel (harness variant 10, mx_quantize_t32_*) against the
row-group kernel (18, mx_quantize_t32l_*) under the targets' write flush, in blocks of 40
calls that alternate (t32, t32l, t32, t32l, ...), printing each block's min / median / max so
that a bimodal kernel shows (docs/perf.md run 87: c's t32l read 279 µs interleaved, 294 and
324 µs in blocks). Usage (GPU machine, libmxbench.so here): python3 t32_probe.py [shapes]
"""
import os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from flush_probe import FLUSH_BYTES, median, samples  # noqa: E402


def main():
    cache = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flush = lambda: cache.zero_()
    for key in (sys.argv[1] if len(sys.argv) > 1 else "c,a").split(","):
        E, Mg, K, N = bench.SHAPES[key]
        W = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) * 0.05
        nbytes = E * N * K * 4 + E * N * K // 512
        for rnd in range(3):
            for v, name in ((10, "t32 "), (18, "t32l")):
                ts = samples(lambda: bench.quantize(W, bench.TILE | bench.TILE_T, variant=v, tpc=0), flush, 40)
                lo, med, hi = ts[0], median(ts), ts[-1]
                print(f"{key} round {rnd} {name}: min {lo:7.1f}  median {med:7.1f}  max {hi:7.1f} µs  ({nbytes / med / 1e3:.0f} GB/s at the median)", flush=True)
        del W
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
