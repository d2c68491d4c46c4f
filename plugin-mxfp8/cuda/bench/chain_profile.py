"""One chained GEMM launch per data kind on shape a, for ncu (docs/perf.md run 97):
  ncu -k regex:mx_cgemm --section SourceCounters --section WarpStateStats python3 chain_profile.py
Operands as chain.py's (Gaussian, Student-t(3)); the re-encoding runs before, outside the filter."""
import os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import chain  # noqa: E402
from bench import DEV, ROWS, TILE, TILE_T  # noqa: E402

E, Mg, K, N = bench.SHAPES[os.environ.get("SHAPE", "a")]
M = E * Mg
offs = torch.tensor([Mg * (i + 1) for i in range(E)], dtype=torch.int32, device=DEV)
for dist in ("gauss", "student-t3"):
    X, W = chain.operands("a", E, Mg, K, N, dist)
    qx, qw = bench.quantize(X, ROWS), bench.quantize(W, TILE | TILE_T)
    cf = chain.ChainFwd(qx["qa"], qx["sa"], qw["qa"], qw["sa"], qw["qt"], offs, E, M, N, K)
    cf.reencode()
    out = torch.empty(M, N, dtype=torch.bfloat16, device=DEV)
    cf.gemm(out)
    torch.cuda.synchronize()
    print(dist, "status", int(cf.status.item()), flush=True)
