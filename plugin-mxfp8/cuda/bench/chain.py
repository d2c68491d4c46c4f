"""The chained GEMM end to end, as the backend runs it (docs/perf.md run 94).

Pipeline per forward: mx_reencode_<fmt> on X (1x32) and on W (32x32 tiles) -> stage-uniform
copies X', W' + residual lists + a status word; mx_scales_to_f32 on the copies' scales;
mx_cgemm_* (256 x 128 chained tiles, residual corrections in the epilogue). Checks, on fresh
random operands each:
  - the re-encoding kernel against reencode.py's torch implementation: X', W' bytes and scales
    bit for bit, the residual lists element for element (values exact);
  - the GEMM against a float64 reference of the original MX operands (small shapes; Gaussian,
    Student-t(3), K with a partial stage and a partial block, and a case built so that the
    residual corrections carry most of the output: without them it must fail) and against
    the default kernel (shapes a-c);
  - the status word: a case with too many residuals per row must report overflow, one with a
    NaN must report non-finite (the host then runs the per-k32 kernel).
Timing (median, bf16 out): torch BF16 _grouped_mm, the backend's kernel (v2t) with its scale
relayouts, the whole chained pipeline, and its parts.
Usage, on the GPU machine (libmxbench.so as for bench.py):
  python3 plugin-mxfp8/cuda/bench/chain.py [--shapes a,b,c] [--rep 60]
"""
import ctypes, os, sys
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import reencode  # noqa: E402
from bench import DEV, ROWS, TILE, TILE_T, cdiv, rup, ptr, ck, lib, c_i64, c_int, c_vp  # noqa: E402

F8 = torch.float8_e4m3fn
OVERFLOW, NONFINITE = 1, 2


class RP(ctypes.Structure):
    _fields_ = [("q", c_vp), ("s", c_vp), ("q2", c_vp), ("s2", c_vp), ("res", c_vp), ("cnt", c_vp), ("status", c_vp),
                ("R", c_i64), ("ise", c_i64), ("isr", c_i64), ("isc", c_i64), ("K", c_int), ("rpe", c_int), ("rdv", c_int), ("slots", c_int)]


class FIX(ctypes.Structure):
    _fields_ = [("resA", c_vp), ("cntA", c_vp), ("resB", c_vp), ("cntB", c_vp), ("Bt", c_vp), ("sBo", c_vp), ("At", c_vp),
                ("sAt", c_vp), ("bt_es", c_i64), ("ise", c_i64), ("isr", c_i64), ("isc", c_i64), ("ldt", c_i64), ("slots", c_int), ("terms", c_int),
                ("mc_ss", c_i64), ("mc_es", c_i64)]


assert ctypes.sizeof(RP) == 104 and ctypes.sizeof(FIX) == 128
lib.mx_launch_reencode.argtypes = [c_int, ctypes.POINTER(RP), c_vp]
lib.mx_launch_cgemm.argtypes = [ctypes.c_char_p, ctypes.POINTER(bench.GP), ctypes.POINTER(FIX), c_int, c_vp]
lib.mx_launch_transpose_u8.argtypes = [c_vp, c_vp, c_int, c_int, c_int, c_vp]


def slots_for(K):
    """The slot rule (for the backend too, once it launches the chained GEMM): 16, plus one per 256 of the reduction."""
    return 16 + K // 256


class Reenc:
    """Buffers and launch of one operand's re-encoding: rows R of K bytes, scales as given."""

    def __init__(self, q, s, R, K, rpe, rdv, ise, isr, isc, status):
        self.q2, self.s2 = torch.empty_like(q), torch.zeros_like(s)
        self.slots = slots_for(K)
        self.res = torch.zeros(R, self.slots, 2, dtype=torch.int32, device=DEV)   # (k, f32 bits)
        self.cnt = torch.full((R,), -1, dtype=torch.int32, device=DEV)
        self.p = RP(ptr(q), ptr(s), ptr(self.q2), ptr(self.s2), ptr(self.res), ptr(self.cnt), ptr(status),
                    R, ise, isr, isc, K, rpe, rdv, self.slots)

    def run(self):
        ck(lib.mx_launch_reencode(0, ctypes.byref(self.p), None), "reencode")

    def dense(self, shape):
        """The lists as a dense float64 tensor of the operand's shape (rows flattened)."""
        R = self.cnt.numel()
        K = shape[-1]
        out = torch.zeros(R, K, dtype=torch.float64, device=DEV)
        cnt = self.cnt.long()
        sl = torch.arange(self.slots, device=DEV)[None, :]
        m = sl < cnt[:, None]
        rows = torch.arange(R, device=DEV)[:, None].expand(R, self.slots)[m]
        ks = self.res[:, :, 0][m].long()
        vs = self.res[:, :, 1][m].view(torch.float32).double()
        out.index_put_((rows, ks), vs, accumulate=True)
        return out.view(shape)


class ChainFwd:
    """X [M, K] 1x32, W [E, N, K] 32x32 (+ its transposed bytes qwt [E, K, N]): the backend's
    chained forward with bf16 or f32 out. X' is transposed after the re-encoding for the
    A' B_res corrections (the backend's mx_transpose_u8 where M % 16 == 0, else torch)."""

    def __init__(self, qx, sx, qw, sw, qwt, offs, E, M, N, K):
        KB, KB4, NB = cdiv(K, 32), rup(cdiv(K, 32), 4), cdiv(N, 32)
        self.status = torch.zeros(2, dtype=torch.int32, device=DEV)   # {flags, residuals listed}
        self.rx = Reenc(qx, sx, M, K, M, 1, 0, 1, KB, self.status)
        self.rw = Reenc(qw, sw, E * N, K, N, 32, NB * KB, 1, KB, self.status)
        self.dims = (E, M, N, K, KB, KB4, NB)
        self.qw, self.sw, self.offs = qw, sw, offs
        # X' transposed and its scales transposed: rows of ldt bytes (a multiple of 16) and 272
        # bytes of slack after each, for the GEMM's aligned bulk copies (MxChainFix); with
        # M % 16 == 0 by the backend's mx_transpose_u8 (rows of M bytes), else by torch
        ldt = rup(M, 16)
        self.fast_t = M % 16 == 0
        self.at_buf = torch.zeros(K * ldt + 272, dtype=torch.uint8, device=DEV)
        self.sat_buf = torch.zeros(KB * ldt + 272, dtype=torch.uint8, device=DEV)
        self.at = self.at_buf[:K * ldt].view(K, ldt)[:, :M]
        self.sat = self.sat_buf[:KB * ldt].view(KB, ldt)[:, :M]
        self.fix = FIX(ptr(self.rx.res), ptr(self.rx.cnt), ptr(self.rw.res), ptr(self.rw.cnt), ptr(qwt), ptr(sw), ptr(self.at_buf),
                       ptr(self.sat_buf), K * N, NB * KB, 1, KB, ldt, self.rx.slots, 3)
        self.suffix = ""   # "_s3": the 3-stage kernel with rounds of 112 units
        assert self.rx.slots == self.rw.slots

    def reencode(self):
        self.status.zero_()
        self.rx.run()
        self.rw.run()
        E, M, N, K, KB = self.dims[:5]
        if self.fast_t:
            ck(lib.mx_launch_transpose_u8(ptr(self.rx.q2), ptr(self.at_buf), M, K, 1, None), "transpose X'")
            ck(lib.mx_launch_transpose_u8(ptr(self.rx.s2), ptr(self.sat_buf), M, KB, 1, None), "transpose X' scales")
        else:
            self.at.copy_(self.rx.q2.t())
            self.sat.copy_(self.rx.s2.view(-1, KB).t())
        self.relayout()

    def relayout(self):
        """The copies' scales as the GEMM's FP32 tables (after each re-encoding)."""
        E, M, N, K, KB, KB4, NB = self.dims
        self.SA = bench.scales_f32(self.rx.s2, 0, KB, 1, M, KB, M, KB4, 1, stage_major=True)
        self.SB = bench.scales_f32(self.rw.s2, NB * KB, 1, KB, KB, NB, KB4, rup(NB, 4) + 4, E)

    def gemm(self, out, fix=True):
        E, M, N, K, KB, KB4, NB = self.dims
        SA, SB, NB4 = self.SA, self.SB, rup(NB, 4) + 4
        bf = out.dtype == torch.bfloat16
        if not fix:
            bench.SUFFIX = "_v8c"
            bench.gemm(bench.kname(True, bf), self.rx.q2, K, self.rw.q2, K, N * K, SA, 4 * M, SB, NB4, SB[0].numel(), out, N, 0, self.offs, E, M, N, K, 0)
            bench.SUFFIX = ""
            return
        p = bench.GP(ptr(self.rx.q2), K, ptr(self.rw.q2), K, N * K, ptr(SA), 4 * M, ptr(SB), NB4, SB[0].numel(), ptr(out), N, 0, ptr(self.offs), E, M, N, K, 0, 0)
        name = f"mx_cgemm_e4m3e4m3_w2d_{'bf16' if bf else 'f32'}{self.suffix}"
        ck(lib.mx_launch_cgemm(name.encode(), ctypes.byref(p), ctypes.byref(self.fix), 0, None), name)

    def __call__(self, out):
        self.reencode()
        self.gemm(out)


def operands(key, E, Mg, K, N, dist):
    M = E * Mg
    g = torch.Generator(device=DEV); g.manual_seed(torch.randint(0, 2**31 - 1, (1,)).item())
    if dist == "residual-carried":
        # every row: stage 0's first block holds one value 2^12 above the rest, so the other
        # three blocks of stage 0 shift by ~12 binades and their six nonzero values each leave
        # E4M3 (residuals, within the slots); W is zero on that first block's K range and X is
        # small elsewhere: the output is carried by the residual products (without the
        # corrections it must fail the tolerance)
        X = torch.randn(M, K, device=DEV, generator=g) / 64.0
        X[:, :128] = 0.0
        X[:, 0] = 4096.0
        pos = 32 + torch.randint(0, 96, (M, 6), device=DEV, generator=g)
        X.scatter_(1, pos, torch.randn(M, 6, device=DEV, generator=g))
        W = torch.randn(E, N, K, device=DEV, generator=g) * 0.05
        W[:, :, :32] = 0.0
    elif dist == "overflow":
        X = torch.randn(M, K, device=DEV, generator=g)
        X[:, (torch.arange(K, device=DEV) % 128) < 32] *= 4096.0
        W = torch.randn(E, N, K, device=DEV, generator=g) * 0.05
    elif dist == "nan":
        X = torch.randn(M, K, device=DEV, generator=g)
        X[M // 2, K // 3] = float("nan")
        W = torch.randn(E, N, K, device=DEV, generator=g) * 0.05
    elif dist == "gauss":
        X = torch.randn(M, K, device=DEV, generator=g)
        W = torch.randn(E, N, K, device=DEV, generator=g) * 0.05
    elif dist.startswith("gauss-w"):
        # W ~ N(0, s^2): the residual count of W's 32x32 tiles depends on where their maxima
        # fall relative to powers of two (run 105: s = 1, as `mxhost bench` draws, has 10x
        # the residuals of s = 0.05), so a sweep of s sweeps the corrections' load
        X = torch.randn(M, K, device=DEV, generator=g)
        W = torch.randn(E, N, K, device=DEV, generator=g) * float(dist[len("gauss-w"):])
    else:
        t = torch.distributions.StudentT(torch.tensor(3.0, device=DEV))
        X = t.sample((M, K))
        W = t.sample((E, N, K)) * 0.05
    return X.to(torch.bfloat16), W.to(torch.bfloat16)


def check_reencode(cf, qx, sx, qw, sw, lines):
    xa, xs, xres = reencode.reencode_rows(qx, sx)
    wa, ws, wres = reencode.reencode_tiles(qw, sw)
    st, listed = int(cf.status[0].item()), int(cf.status[1].item())
    ok = True
    if not st & NONFINITE:   # (a NaN block's copy is never read: the host falls back)
        ok = torch.equal(cf.rx.q2, xa) and torch.equal(cf.rx.s2, xs) and torch.equal(cf.rw.q2, wa) and torch.equal(cf.rw.s2, ws)
    nx, nw = int((xres != 0).sum()), int((wres != 0).sum())
    if st == 0:   # (the count is the gate's input: it must be the lists' total)
        ok = ok and torch.equal(cf.rx.dense(xres.shape), xres) and torch.equal(cf.rw.dense(wres.shape), wres) and listed == nx + nw
    what = "not compared" if st & NONFINITE else ("bytes, scales, lists" if st == 0 else "bytes, scales")
    lines.append(f"  re-encoding kernel vs torch ({what}): {'EXACT' if ok else 'MISMATCH'}; "
                 f"residuals X {nx} ({nx / xres.numel():.1e}, max/row {int((xres != 0).sum(1).max())}), "
                 f"W {nw} ({nw / wres.numel():.1e}, max/row {int((wres != 0).sum(-1).max())}); slots {cf.rx.slots}; status {st}, listed {listed}")
    return ok


def run_case(key, E, Mg, K, N, dist, rep, with_ref, results):
    M = E * Mg
    offs_host = [Mg * (i + 1) for i in range(E)]
    offs = torch.tensor(offs_host, dtype=torch.int32, device=DEV)
    X, W = operands(key, E, Mg, K, N, dist)
    qx, qw = bench.quantize(X, ROWS), bench.quantize(W, TILE | TILE_T)
    cf = ChainFwd(qx["qa"], qx["sa"], qw["qa"], qw["sa"], qw["qt"], offs, E, M, N, K)
    cf.reencode()
    torch.cuda.synchronize()
    lines = [f"{key} {dist} (E {E}, rows/expert {Mg}, K {K}, N {N}):"]
    ok = check_reencode(cf, qx["qa"], qx["sa"], qw["qa"], qw["sa"], lines)
    st = int(cf.status[0].item())
    if dist == "overflow":
        ok = ok and (st & OVERFLOW) != 0
        lines.append(f"  status reports overflow: {'yes' if st & OVERFLOW else 'NO'} (the host runs the per-k32 kernel)")
    elif dist == "nan":
        ok = ok and (st & NONFINITE) != 0
        lines.append(f"  status reports non-finite: {'yes' if st & NONFINITE else 'NO'} (the host runs the per-k32 kernel)")
    else:
        ok = ok and st == 0
        out = torch.full((M, N), float("nan"), dtype=torch.float32, device=DEV)
        cf.gemm(out)
        o_def = torch.empty(M, N, dtype=torch.float32, device=DEV)
        bench.fwd_call(qx["qa"], qx["sa"], qw["qa"], qw["sa"], offs, E, M, N, K, True, o_def)
        torch.cuda.synchronize()
        if with_ref:
            ref = reencode.float64_reference(qx, qw, E, Mg, N)
            nofix = torch.full((M, N), float("nan"), dtype=torch.float32, device=DEV)
            cf.gemm(nofix, fix=False)
            others = []   # the other builds
            for sfx in ("_s3", "_poll", "_s3_poll", "_s3_cc"):
                o = torch.full((M, N), float("nan"), dtype=torch.float32, device=DEV)
                cf.suffix = sfx
                cf.gemm(o)
                others.append((f"chained{sfx} + corrections", o, True))
            cf.suffix = ""
            torch.cuda.synchronize()
            for name, o, must in [("chained + corrections", out, True)] + others + [
                    ("chained without corrections", nofix, None), ("default kernel", o_def, True)]:
                mx, snr = reencode.err(o, ref)
                passed = snr >= 60.0 and mx <= 2e-3
                if must:
                    ok = ok and passed
                if dist == "residual-carried" and must is None:
                    ok = ok and not passed   # the case must depend on the corrections
                lines.append(f"  vs float64: {name}: max_rel {mx:.2e}, snr {snr:.1f} dB{'' if passed else ' (fails 60 dB / 2e-3)'}")
            del ref
        mx, snr = reencode.err(out, o_def.double())
        ok = ok and snr >= 60.0
        lines.append(f"  chained vs default kernel: max_rel {mx:.2e}, snr {snr:.1f} dB")
        if rep and AB:
            ab_epilogues(key, dist, cf, M, N, rep)
        elif rep:
            fl = 2.0 * M * N * K
            o_bf = torch.empty(M, N, dtype=torch.bfloat16, device=DEV)
            t_bf = reencode.time_torch_bf16(X, W, offs, rep)

            def v2t():
                bench.SUFFIX = "_v2t"
                bench.fwd_call(qx["qa"], qx["sa"], qw["qa"], qw["sa"], offs, E, M, N, K, True, o_bf)
                bench.SUFFIX = ""
            t_v2t = bench.tms(v2t, rep)
            t_all = bench.tms(lambda: cf(o_bf), rep)
            t_re = bench.tms(cf.reencode, rep)
            t_g = bench.tms(lambda: cf.gemm(o_bf), rep)
            t_nf = bench.tms(lambda: cf.gemm(o_bf, fix=False), rep)
            t_b = {}
            for sfx in ("_s3", "_sepi", "_s3_sepi") if LEAN else ("_s3", "_poll", "_s3_poll", "_sepi", "_s3_sepi"):
                cf.suffix = sfx
                t_b[sfx] = bench.tms(lambda: cf.gemm(o_bf), rep)
            cf.suffix = ""
            t_g3 = t_b["_s3"]
            diag = []   # where the corrections' time goes: list lengths only, each term alone
            for terms in () if LEAN else (0, 1, 2):
                cf.fix.terms = terms
                diag.append(bench.tms(lambda: cf.gemm(o_bf), rep))
            cf.fix.terms = 3
            t_bf2 = reencode.time_torch_bf16(X, W, offs, rep)
            more = "" if LEAN else (f", polling {t_b['_poll'] * 1e3:.0f}, 3 stages polling {t_b['_s3_poll'] * 1e3:.0f}; "
                                    f"rounds only {diag[0] * 1e3:.0f}, A_res B only {diag[1] * 1e3:.0f}, A' B_res only {diag[2] * 1e3:.0f}")
            lines.append(f"  timing (bf16 out, median µs): torch BF16 {t_bf * 1e3:.0f} / {t_bf2 * 1e3:.0f} (before / after) | "
                         f"v2t {t_v2t * 1e3:.0f} (x BF16 {t_bf / t_v2t:.2f}) | chained pipeline {t_all * 1e3:.0f} "
                         f"(x BF16 {t_bf / t_all:.2f}, x v2t {t_v2t / t_all:.2f}; {fl / t_all / 1e9:.0f} TFLOP/s) = "
                         f"re-encode X + W (+ X' transposed, scale tables) {t_re * 1e3:.0f} + GEMM {t_g * 1e3:.0f} (x BF16 {t_bf / t_g:.2f}) (3 stages {t_g3 * 1e3:.0f}; without the corrections {t_nf * 1e3:.0f}{more})"
                         f" | epilogue, 16-byte vs 4-byte stores: 4 stages {t_g * 1e3:.0f} vs {t_b['_sepi'] * 1e3:.0f}, 3 stages {t_g3 * 1e3:.0f} vs {t_b['_s3_sepi'] * 1e3:.0f}")
            per_el = int(cf.status[1].item()) / (M * K + E * N * K)
            results.append((key, dist, per_el, t_bf, t_v2t, t_all, t_re, t_g, t_nf, t_g3, t_b["_sepi"], t_b["_s3_sepi"]))
    lines.append(f"  {'PASS' if ok else 'FAIL'}")
    print("\n".join(lines), flush=True)
    return ok


def ab_epilogues(key, dist, cf, M, N, rep):
    """Builds of the chained GEMM (AB_BUILDS: suffixes; run 110: 16-byte vs 4-byte `_sepi`
    epilogue stores at both stage counts; run 111: `_s3` with the B corrections on the tensor
    cores against `_s3_cc`, all on the CUDA cores) timed in AB interleaved rounds whose order rotates, so that the card's clock drift
    and a row's position fall on every build alike; medians of the rounds."""
    o_bf = torch.empty(M, N, dtype=torch.bfloat16, device=DEV)
    builds = AB_BUILDS
    t = {b: [] for b in builds}
    for r in range(AB):
        k = r % len(builds)
        for b in builds[k:] + builds[:k]:
            cf.suffix = b
            t[b].append(bench.tms(lambda: cf.gemm(o_bf), rep))
    cf.suffix = ""
    med = {b: sorted(v)[len(v) // 2] * 1e3 for b, v in t.items()}
    per_el = int(cf.status[1].item()) / (M * cf.dims[3] + cf.dims[0] * N * cf.dims[3])
    cols = " | ".join(f"{b or '4 stages'} {med[b]:6.0f} µs ({med[b] / med[builds[0]]:.3f})" for b in builds)
    print(f"AB {key:3} {dist:11} {per_el:8.1e} res/el | {cols}  [{AB} rounds, ratios to {builds[0] or '4 stages'}]", flush=True)


LEAN = False   # --lean: time the default and 3-stage builds only (for sweeps)
AB = 0         # --ab N: only the build A/B, N interleaved rounds (runs 110-111)
AB_BUILDS = ["", "_sepi", "_s3", "_s3_sepi"]


def main():
    global LEAN, AB
    bench.SHAPES.setdefault("bd", (8, 4096, 8192, 2048))   # b's dgrad as the chained kernel sees it

    def extra(ap):
        ap.add_argument("--dists", default="gauss,student-t3",
                        help="operand kinds timed per shape: gauss, student-t3, gauss-w<s> (W ~ N(0, s^2))")
        ap.add_argument("--skip-small", action="store_true", help="skip the small cases against float64")
        ap.add_argument("--lean", action="store_true", help="time the default and 3-stage builds only")
        ap.add_argument("--ab", type=int, default=0, help="only the build A/B, this many interleaved rounds")
        ap.add_argument("--ab-builds", default=",".join(AB_BUILDS),
                        help="the builds --ab compares, as kernel-name suffixes ('' = the 4-stage build)")
    a = reencode.shape_args(extra)
    LEAN, AB, AB_BUILDS[:] = a.lean, a.ab, a.ab_builds.split(",")
    ok = True
    if not a.skip_small:
        for dist in ("gauss", "student-t3", "residual-carried", "overflow", "nan"):
            ok &= run_case("small", 3, 512, 2880, 256, dist, 0, True, [])
        ok &= run_case("small-k2064", 2, 300, 2064, 384, "student-t3", 0, True, [])   # partial stage and block, partial tiles
        ok &= run_case("small-k4096", 2, 1024, 4096, 512, "student-t3", 0, True, [])
    results = []
    for key in a.shapes.split(","):
        E, Mg, K, N = bench.SHAPES[key]
        for dist in a.dists.split(","):
            ok &= run_case(key, E, Mg, K, N, dist, a.rep, False, results)
            torch.cuda.empty_cache()
    print("\nshape dist         residuals/el  torch BF16   v2t (x BF16)    chained (x BF16, x v2t)   re-encode   GEMM (x BF16, x v2t)  3-stage GEMM (x BF16)  (no corrections)"
          "  4-byte-store epilogue: GEMM, 3-stage (x BF16)")
    for key, dist, per_el, t_bf, t_v2t, t_all, t_re, t_g, t_nf, t_g3, t_se, t_se3 in results:
        print(f"{key:5} {dist:13} {per_el:9.1e} {t_bf * 1e3:8.0f} µs {t_v2t * 1e3:6.0f} ({t_bf / t_v2t:.2f}) {t_all * 1e3:8.0f} ({t_bf / t_all:.2f}, {t_v2t / t_all:.2f}) "
              f"{t_re * 1e3:9.0f} {t_g * 1e3:7.0f} ({t_bf / t_g:.2f}, {t_v2t / t_g:.2f}) {t_g3 * 1e3:7.0f} ({t_bf / t_g3:.2f}) ({t_nf * 1e3:.0f})"
              f"  {t_se * 1e3:7.0f} ({t_bf / t_se:.2f}), {t_se3 * 1e3:7.0f} ({t_bf / t_se3:.2f})")
    print("ALL PASS" if ok else "SOME FAILED", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
