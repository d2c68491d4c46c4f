"""Quantizer launches for an ncu profile (one of each, shape b of the anchors, bf16 input).

    ncu -k regex:mx_quantize --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section Occupancy python3 ncu_quant.py

Launch order: W 32x32 + transposed copy (tiled kernel), the same by mx_quantize_t32_*
(variant 10, the backend's kernel for it), X 1x32 rows (tiled kernel),
X 1x32 rows (flat kernel, mx_quantize_rows_*), W again (warp-per-block kernel,
mx_quantize_tiles_*), X rows and W with the register-prefetch tiled kernel (variant 7),
torch's copy of X. Needs libmxbench.so (run.sh builds it).
"""
import torch

import bench

E, Mg, K, N = bench.SHAPES["b"]
X = torch.randn(E * Mg, K, device=bench.DEV, dtype=torch.bfloat16)
W = torch.randn(E, N, K, device=bench.DEV, dtype=torch.bfloat16) * 0.05
bench.quantize(W, bench.TILE | bench.TILE_T)
bench.quantize(W, bench.TILE | bench.TILE_T, variant=10)  # mx_quantize_t32_* (TMA ring)
bench.quantize(X, bench.ROWS)
bench.quantize(X, bench.ROWS, variant=2)
bench.quantize(W, bench.TILE | bench.TILE_T, variant=6)
bench.quantize(X, bench.ROWS, variant=7)  # the register-prefetch tiled kernel (variant 7)
bench.quantize(W, bench.TILE | bench.TILE_T, variant=7)  # the register-prefetch tiled kernel
Y = torch.empty_like(X)
Y.copy_(X)  # torch's copy of the same bytes, for reference (ncu -k regex:'mx_quantize|elementwise')
torch.cuda.synchronize()
print("ncu_quant: 8 launches done")
