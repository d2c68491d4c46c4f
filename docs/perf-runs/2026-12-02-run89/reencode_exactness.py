"""How often can MX operands be re-encoded exactly to one scale per 128-deep stage?"""
import numpy as np, ml_dtypes, sys
F8 = ml_dtypes.float8_e4m3fn
def rceil_b(amax):
    v = (amax / np.float32(448.0)).astype(np.float32)
    bits = v.view(np.uint32); E = (bits >> 23) & 0xFF; M = bits & 0x7FFFFF
    b = E.astype(np.int32)
    bump = (M > 0) & (E != 0xFE) & ~((E == 0) & (M <= 0x400000))
    b = b + bump
    return np.where(v == 0, 0, b)
def q_e4m3(x, b):  # x [..., 32] float32, b [...] int
    X = np.ldexp(np.float32(1), b - 127).astype(np.float32)
    return (x / X[..., None]).astype(F8).astype(np.float32)
def exact_after_shift(P, d):  # P e4m3 values float32, shift down by d binades
    r = np.ldexp(P, -d)
    return r.astype(F8).astype(np.float32) == r
def rows_1x32(x):  # x [R, K] -> P [R, KB, 32], b [R, KB]
    R, K = x.shape; xb = x.reshape(R, K // 32, 32)
    b = rceil_b(np.abs(xb).max(-1)); return q_e4m3(xb, b), b
def report(name, P, b, group_axis_shape):
    pass
rng = np.random.default_rng(1)
def study_rows(name, x, tile_rows=64):
    R, K = x.shape
    P, b = rows_1x32(x)
    bc = b.reshape(R, K // 128, 4); S = bc.max(-1, keepdims=True); d = (S - bc)
    Pc = P.reshape(R, K // 128, 4, 32)
    ok = exact_after_shift(Pc, d[..., None])
    inexact = (~ok).sum()
    chunk_bad = (~ok).any(-1).any(-1)            # [R, KC]
    tile_bad = chunk_bad.reshape(R // tile_rows, tile_rows, K // 128).any(1)
    print(f"{name}: elements {x.size}, inexact {inexact} ({inexact / x.size:.2e}); blocks shifted {(d > 0).mean():.2f}; "
          f"d>=2 {(d >= 2).mean():.3f}; 1x128 row chunks inexact {chunk_bad.mean():.4f}; {tile_rows}-row stage tiles inexact {tile_bad.mean():.3f}")
def study_tiles(name, w):  # w [N, K], 32x32 blocks; unify the 4 K-blocks of each (32-col block, 128-K chunk)
    N, K = w.shape
    wb = w.reshape(N // 32, 32, K // 32, 32).transpose(0, 2, 1, 3)  # [NB, KB, 32, 32]
    b = rceil_b(np.abs(wb).max((-1, -2)))
    X = np.ldexp(np.float32(1), b - 127).astype(np.float32)
    P = (wb / X[..., None, None]).astype(F8).astype(np.float32)
    bc = b.reshape(N // 32, K // 128, 4); S = bc.max(-1, keepdims=True); d = S - bc
    ok = exact_after_shift(P.reshape(N // 32, K // 128, 4, 32, 32), d[..., None, None])
    inexact = (~ok).sum()
    blk_bad = (~ok).any((-1, -2, -3))             # [NB, KC]
    tile_bad = blk_bad.reshape(N // 128, 4, K // 128).any(1)
    print(f"{name}: elements {w.size}, inexact {inexact} ({inexact / w.size:.2e}); blocks shifted {(d > 0).mean():.2f}; "
          f"(32-col, 128-K) blocks inexact {blk_bad.mean():.4f}; 128x128 stage tiles inexact {tile_bad.mean():.3f}")
x = rng.standard_normal((4096, 4096), dtype=np.float32)
study_rows("X randn", x)
study_rows("X student-t(3) (heavy tails)", rng.standard_t(3, (4096, 4096)).astype(np.float32))
study_rows("X randn * row scale lognormal(0,1)", x * np.exp(rng.standard_normal((4096, 1))).astype(np.float32))
study_tiles("W randn*0.05", (rng.standard_normal((4096, 4096), dtype=np.float32) * 0.05))
study_tiles("W student-t(3)", rng.standard_t(3, (4096, 4096)).astype(np.float32))
