"""Exact 1x128 re-encoding of MX operands, end to end in the harness (docs/perf.md run 93).

The chained kernels (v2c, v8c) promote once per 128-deep stage, which is exact only when an
operand's block scales are equal across each stage. Any MX operand can be brought there
exactly, up to a few elements:
  A = A' + A_res, B = B' + B_res, where A' shifts every 1x32 block of a stage (a row's four
  blocks) down to the stage's largest scale S (P * 2^(s - S) re-encoded in E4M3; the stage's
  four scale bytes all become S), B' does the same for the four 32x32 blocks of a 32-column
  block and stage, and A_res / B_res hold the elements whose shifted value is not an E4M3
  value (tiny values of a smaller-scale block), at their exact MX value, zero in A' / B'.
  Then A B = A' B' + A' B_res + A_res B exactly (products of exact MX values; only the
  summation order differs), the first term on the chained kernel, the other two sparse.
This script checks that on random operands (Gaussian and heavy-tailed) against the default
kernel and a float64 reference, counts the residual elements, and times v8c on the
re-encoded operands next to v2t (the backend's kernel) and torch BF16 `_grouped_mm`.
Usage, on the GPU machine (libmxbench.so as for bench.py):
  python3 plugin-mxfp8/cuda/bench/reencode.py [--shapes a,b,c] [--rep 60]
"""
import argparse, os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
from bench import DEV, ROWS, TILE, TILE_T, cdiv  # noqa: E402

F8 = torch.float8_e4m3fn


def e4m3_exact_shift(q8, d):
    """q8: E4M3 values (float32), d: non-negative shifts (same shape). Returns (shifted value
    re-encoded in E4M3 as float32, exact mask)."""
    v = q8 * torch.exp2(-d.float())
    r = v.to(F8).to(torch.float32)
    return r, r == v


def values_rows(qa, sa):
    M, K = qa.shape
    return qa.view(F8).double() * torch.exp2(sa.double() - 127.0).repeat_interleave(32, 1)[:, :K]


def values_tiles(qa, sa):
    E, N, K = qa.shape
    return qa.view(F8).double() * torch.exp2(sa.double() - 127.0).repeat_interleave(32, 1)[:, :N].repeat_interleave(32, 2)[:, :, :K]


def stage_max(sa):
    """Each stage's largest scale byte (four blocks along the last axis), repeated per block."""
    lead, KB = sa.shape[:-1], sa.shape[-1]
    KC = cdiv(KB, 4)
    s = torch.zeros(*lead, 4 * KC, dtype=torch.int32, device=DEV)
    s[..., :KB] = sa.int()                     # padding blocks: byte 0, never the maximum unless all are 0
    return s.view(*lead, KC, 4).amax(-1, keepdim=True).expand(*lead, KC, 4).reshape(*lead, 4 * KC)[..., :KB]


def split_exact(qa, d, val):
    """Bytes shifted down by d where exact (else 0) and the exact values of the rest (float64)."""
    r, ok = e4m3_exact_shift(qa.view(F8).to(torch.float32), d)
    new = torch.where(ok, r, torch.zeros_like(r)).to(F8).view(torch.uint8)
    return new, torch.where(ok, torch.zeros_like(val), val)


def reencode_rows(qa, sa):
    """A [M, K] bytes, scales [M, KB]: (A' bytes, A' scales, A_res float64 [M, K])."""
    K = qa.shape[1]
    S = stage_max(sa)
    d = (S - sa.int()).repeat_interleave(32, 1)[:, :K]
    a_new, res = split_exact(qa, d, values_rows(qa, sa))
    return a_new, S.to(torch.uint8).contiguous(), res


def reencode_tiles(qa, sa):
    """W [E, N, K] bytes, 32x32 scales [E, NB, KB]: (W' bytes, W' scales, W_res float64)."""
    N, K = qa.shape[1], qa.shape[2]
    S = stage_max(sa)
    d = (S - sa.int()).repeat_interleave(32, 1)[:, :N].repeat_interleave(32, 2)[:, :, :K]
    w_new, res = split_exact(qa, d, values_tiles(qa, sa))
    return w_new, S.to(torch.uint8).contiguous(), res


def sparse_corrections(out, a_vals_new, a_res, w_vals, w_res, offs_host):
    """out[M, N] (float64) += A' W_res^T + A_res W^T, touching only the residual elements."""
    starts = [0] + offs_host[:-1]
    rows_e = torch.zeros(out.shape[0], dtype=torch.long, device=DEV)
    for e, (a, b) in enumerate(zip(starts, offs_host)):
        rows_e[a:b] = e
    r, k = a_res.nonzero(as_tuple=True)                   # A_res W^T: row r gets v * W[e(r)][:, k]
    if r.numel():
        v = a_res[r, k]
        out.index_add_(0, r, v[:, None] * w_vals[rows_e[r], :, k])
    for e, (a, b) in enumerate(zip(starts, offs_host)):  # A' W_res^T: column n of expert e's rows
        n, k = w_res[e].nonzero(as_tuple=True)
        if n.numel() and b > a:
            out[a:b].index_add_(1, n, a_vals_new[a:b][:, k] * w_res[e][n, k][None, :])
    return out


def float64_reference(qx, qw, E, Mg, N):
    """The exact product of the original MX operands (X 1x32 rows, W 32x32 tiles), float64."""
    xd, wd = values_rows(qx["qa"], qx["sa"]), values_tiles(qw["qa"], qw["sa"])
    ref = torch.empty(E * Mg, N, dtype=torch.float64, device=DEV)
    for e in range(E):
        ref[Mg * e:Mg * (e + 1)] = xd[Mg * e:Mg * (e + 1)] @ wd[e].t()
    return ref


def time_torch_bf16(X, W, offs, rep):
    """Median time (ms) of torch's BF16 grouped GEMM on the unquantized operands."""
    Wt = W.transpose(-2, -1)
    return bench.tms(lambda: torch._grouped_mm(X, Wt, offs=offs), rep)


def err(out, ref):
    d = out.double() - ref
    snr = 10 * torch.log10((ref * ref).sum() / (d * d).sum().clamp_min(1e-300)).item()
    return (d.abs().max() / ref.abs().max()).item(), snr


def run_shape(key, E, Mg, K, N, dist, rep, with_ref):
    M = E * Mg
    offs_host = [Mg * (i + 1) for i in range(E)]
    offs = torch.tensor(offs_host, dtype=torch.int32, device=DEV)
    g = torch.Generator(device=DEV); g.manual_seed(hash((key, dist)) & 0xFFFF)
    if dist == "residual-heavy":
        # every stage's first 1x32 block 2^12 larger than the other three, whose values then
        # mostly leave E4M3 when shifted to its scale, and W zero on those first blocks'
        # K: the output is made almost only of residual products (without the corrections ~0 dB)
        X = torch.randn(M, K, device=DEV, generator=g)
        X[:, (torch.arange(K, device=DEV) % 128) < 32] *= 4096.0
        W = torch.randn(E, N, K, device=DEV, generator=g) * 0.05
        W[:, :, (torch.arange(K, device=DEV) % 128) < 32] = 0.0
    elif dist == "gauss":
        X = torch.randn(M, K, device=DEV, generator=g)
        W = torch.randn(E, N, K, device=DEV, generator=g) * 0.05
    else:  # Student-t(3): heavy tails, many more tiny values next to large ones
        t = torch.distributions.StudentT(torch.tensor(3.0, device=DEV))
        X = t.sample((M, K))
        W = t.sample((E, N, K)) * 0.05
    X, W = X.to(torch.bfloat16), W.to(torch.bfloat16)
    qx, qw = bench.quantize(X, ROWS), bench.quantize(W, TILE | TILE_T)
    xa, xs, xres = reencode_rows(qx["qa"], qx["sa"])
    wa, ws, wres = reencode_tiles(qw["qa"], qw["sa"])
    nres_x, nres_w = int((xres != 0).sum()), int((wres != 0).sum())
    # the chained kernel on the re-encoded operands, f32 out, then the sparse corrections
    out = torch.full((M, N), float("nan"), dtype=torch.float32, device=DEV)
    bench.SUFFIX = "_v8c"
    bench.fwd_call(xa, xs, wa, ws, offs, E, M, N, K, True, out)
    torch.cuda.synchronize()
    bench.SUFFIX = ""
    fixed = sparse_corrections(out.double(), values_rows(xa, xs), xres, values_tiles(qw["qa"], qw["sa"]), wres, offs_host)
    uncorrected = out.double()
    # the default kernel on the original MX operands (validated against float64 in bench.py)
    o_def = torch.empty(M, N, dtype=torch.float32, device=DEV)
    bench.fwd_call(qx["qa"], qx["sa"], qw["qa"], qw["sa"], offs, E, M, N, K, True, o_def)
    torch.cuda.synchronize()
    lines = [f"{key} {dist}: residual elements X {nres_x} ({nres_x / X.numel():.1e}), W {nres_w} ({nres_w / W.numel():.1e})"]
    if with_ref:
        ref = float64_reference(qx, qw, E, Mg, N)
        for name, o in (("v8c on A', W' + corrections", fixed), ("v8c on A', W' without corrections", uncorrected), ("default kernel (v2t family)", o_def)):
            mx, snr = err(o, ref)
            lines.append(f"  vs float64 reference: {name}: max_rel {mx:.2e}, snr {snr:.1f} dB")
        del ref
    mx, snr = err(fixed, o_def.double())
    lines.append(f"  v8c + corrections vs default kernel: max_rel {mx:.2e}, snr {snr:.1f} dB")
    if rep:
        fl = 2.0 * M * N * K
        o_bf = torch.empty(M, N, dtype=torch.bfloat16, device=DEV)
        t_bf = time_torch_bf16(X, W, offs, rep)

        def k(sfx, a, sa, w, sw):
            def f():
                bench.SUFFIX = sfx
                bench.fwd_call(a, sa, w, sw, offs, E, M, N, K, True, o_bf)
            return f
        t_v2t = bench.tms(k("_v2t", qx["qa"], qx["sa"], qw["qa"], qw["sa"]), rep)
        t_v8c = bench.tms(k("_v8c", xa, xs, wa, ws), rep)
        bench.SUFFIX = ""
        lines.append(f"  timing (bf16 out, median): torch BF16 {t_bf * 1e3:.1f} µs ({fl / t_bf / 1e9:.0f} TFLOP/s) | "
                     f"v2t {t_v2t * 1e3:.1f} µs (x BF16 {t_bf / t_v2t:.2f}) | v8c on A', W' {t_v8c * 1e3:.1f} µs "
                     f"({fl / t_v8c / 1e9:.0f} TFLOP/s, x BF16 {t_bf / t_v8c:.2f}; corrections not included)")
    print("\n".join(lines), flush=True)


def shape_args(extra=None):
    """--shapes and --rep (the scripts of runs 93-98), after printing the device; `extra(ap)`
    adds a script's own options."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="a,b,c")
    ap.add_argument("--rep", type=int, default=60)
    if extra:
        extra(ap)
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    return a


def main():
    a = shape_args()
    # small shapes against float64 (both distributions, K with a partial stage), then the anchors
    run_shape("small", 3, 512, 2880, 256, "gauss", 0, True)
    run_shape("small", 3, 512, 2880, 256, "student-t3", 0, True)
    run_shape("small-k4096", 2, 1024, 4096, 512, "student-t3", 0, True)
    run_shape("small", 3, 512, 2880, 256, "residual-heavy", 0, True)
    for key in a.shapes.split(","):
        E, Mg, K, N = bench.SHAPES[key]
        for dist in ("gauss", "student-t3"):
            run_shape(key, E, Mg, K, N, dist, a.rep if dist == "gauss" else 0, False)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
