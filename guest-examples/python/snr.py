"""snr: SNR (dB) of MXFP8 grouped GEMM for every element format (E4M3, E5M2), scale
mode (rceil, floor, even) and weight block (1×32, 32×32), for forward, dgrad and
wgrad, on a routed MoE layout (expert groups aligned to 32, an empty expert, padding).
The Python twin of guest-examples/snr (same table, metrics and gates).

Three numbers per row, all against FP64 references (plain Python, `reference`):
- in-call vs unq.: dense operands quantized inside the call against the unquantized data;
- pre-q. vs unq.: pre-quantized operands (`gemm.quantize`; with 32×32 weight tiles
  `gemm.quantize_for_gemm`, as GroupedLinear) against the unquantized data;
- pre-q. vs deq.: the same output against an FP64 GEMM of the dequantized operands.

Gates: forward vs dequantized ≥ 40 dB; forward, dgrad and wgrad vs unquantized ≥ 20,
15 and 15 dB. Args: [--seed S] (default 11). Runs on plugin `mxfp8`.

    mxhost run guest-examples/python/snr.py [-- --seed 11]
"""

from mxhost_guest import (
    Along, Dense, Dtype, ElementFormat, Failure, MxSpec, Quantized, ScaleMode, Tensor,
    Tile32x32, WeightLayout, gemm, metric, plugin, progress, reference,
)

K = 256
N = 256
GROUPS = [96, 0, 160, 64]  # rows per expert as a router with align 32 leaves them
PADDING_ROWS = 32

GATE_FWD_DEQ = 40.0
GATE_UNQ = {"forward": 20.0, "dgrad": 15.0, "wgrad": 15.0}


def deq(q):
    return gemm.dequantize(q).to_f32()


def parse_seed(args):
    if "--seed" not in args:
        return 11
    i = args.index("--seed")
    try:
        return int(args[i + 1])
    except (IndexError, ValueError):
        raise Failure("--seed needs an integer") from None


def run(args):
    seed = parse_seed(args)
    plugin.select("mxfp8")
    offs, acc = [], 0
    for g in GROUPS:
        acc += g
        offs.append(acc)
    rows = offs[-1] + PADDING_ROWS
    r, n, k, e = rows, N, K, len(GROUPS)
    x = Tensor.randn_f32([rows, K], seed)
    w = Tensor.randn([e, N, K], Dtype.F32, seed + 1, 0.0, 0.05)
    dy = Tensor.randn_f32([rows, N], seed + 2)
    xv, wv, dyv = x.to_f32(), w.to_f32(), dy.to_f32()
    ref_y = reference.forward(xv, wv, offs, r, n, k)
    ref_dx = reference.dgrad(dyv, wv, offs, r, n, k)
    ref_dw = reference.wgrad(dyv, xv, offs, n, k)

    formats = [(ElementFormat.E4M3, "e4m3"), (ElementFormat.E5M2, "e5m2")]
    modes = [(ScaleMode.RCEIL, "rceil"), (ScaleMode.FLOOR, "floor"), (ScaleMode.EVEN, "even")]
    blocks = [(False, "1x32"), (True, "32x32")]
    total = len(formats) * len(modes) * len(blocks)
    table = []
    done = 0
    for fmt, fname in formats:
        for mode, mname in modes:
            def spec(block):
                return MxSpec(fmt, mode, block)

            # wgrad: dy and x along M; no weight operand.
            o = gemm.options(format=fmt, mode=mode)
            dw_in = gemm.wgrad(Dense(dy), Dense(x), offs, o).to_f32()
            qdy_m, qx_m = gemm.quantize(dy, spec(Along(0))), gemm.quantize(x, spec(Along(0)))
            dw = gemm.wgrad(Quantized(qdy_m), Quantized(qx_m), offs, o).to_f32()
            exact_dw = reference.wgrad(deq(qdy_m), deq(qx_m), offs, n, k)
            for blocks_2d, bname in blocks:
                ob = gemm.with_options(o, weight_blocks_2d=blocks_2d)

                def wspec(axis):
                    return spec(Tile32x32 if blocks_2d else Along(axis))

                # forward: x along K, w along K (or tiles). With tiles the operands are
                # quantized for a GEMM, as GroupedLinear quantizes them (the same MX tensors;
                # on a Hopper GPU the chained GEMM multiplies them).
                y_in = gemm.forward(Dense(x), Dense(w), offs, ob).to_f32()
                quant = gemm.quantize_for_gemm if blocks_2d else gemm.quantize
                qx, qw = quant(x, spec(Along(1))), quant(w, wspec(2))
                y = gemm.forward(Quantized(qx), Quantized(qw), offs, ob).to_f32()
                exact = reference.forward(deq(qx), deq(qw), offs, r, n, k)
                table.append(("forward", fname, mname, bname, reference.snr_db(ref_y, y_in),
                              reference.snr_db(ref_y, y), reference.snr_db(exact, y)))
                # dgrad: dy along N, w along N (or tiles: the [E, K, N] copy from
                # quantize_with_transpose, passed with weight layout kn).
                dx_in = gemm.dgrad(Dense(dy), Dense(w), offs, ob).to_f32()
                qdy = quant(dy, spec(Along(1)))
                if blocks_2d:
                    qw_n, qw_t = gemm.quantize_with_transpose(w, wspec(1), for_gemm=True)
                    if list(qw_t.shape()) != [e, k, n]:
                        raise Failure(f"transposed weight copy has shape {qw_t.shape()}")
                    ob_d = gemm.with_options(ob, weight_layout=WeightLayout.KN)
                    dx = gemm.dgrad(Quantized(qdy), Quantized(qw_t), offs, ob_d).to_f32()
                else:
                    qw_n = gemm.quantize(w, wspec(1))
                    dx = gemm.dgrad(Quantized(qdy), Quantized(qw_n), offs, ob).to_f32()
                exact = reference.dgrad(deq(qdy), deq(qw_n), offs, r, n, k)
                table.append(("dgrad", fname, mname, bname, reference.snr_db(ref_dx, dx_in),
                              reference.snr_db(ref_dx, dx), reference.snr_db(exact, dx)))
                table.append(("wgrad", fname, mname, bname, reference.snr_db(ref_dw, dw_in),
                              reference.snr_db(ref_dw, dw), reference.snr_db(exact_dw, dw)))
                done += 1
                progress(done, total, "snr configurations")

    print(f"snr: plugin {plugin.active()}, E = {e} experts, rows per expert {GROUPS} + "
          f"{PADDING_ROWS} padding, K = {K}, N = {N}, seed {seed}")
    print(f"{'pass':<8} {'fmt':<5} {'mode':<6} {'W blk':<6} {'in-call vs unq.':>16} "
          f"{'pre-q. vs unq.':>16} {'pre-q. vs deq.':>16}")
    failures = []
    for pas, fname, mname, bname, in_call, pre_unq, pre_deq in table:
        print(f"{pas:<8} {fname:<5} {mname:<6} {bname:<6} {in_call:>13.1f} dB "
              f"{pre_unq:>13.1f} dB {pre_deq:>13.1f} dB")
        name = f"{pas}/{fname}/{mname}/{bname}"
        metric(f"snr_in_call_db/{name}", 0, in_call)
        metric(f"snr_vs_dequantized_db/{name}", 0, pre_deq)
        gate = GATE_UNQ[pas]
        for what, v in (("in-call", in_call), ("pre-quantized", pre_unq)):
            if not v >= gate:
                failures.append(f"{name} {what} vs unquantized {v:.1f} dB < {gate:g} dB")
        if pas == "forward" and not pre_deq >= GATE_FWD_DEQ:
            failures.append(f"{name} vs dequantized {pre_deq:.1f} dB < {GATE_FWD_DEQ:g} dB")
    if failures:
        raise Failure("SNR gates failed: " + "; ".join(failures))
    return (f"snr: all {len(table)} rows pass the gates (forward vs dequantized ≥ "
            f"{GATE_FWD_DEQ:g} dB; vs unquantized forward/dgrad/wgrad ≥ 20/15/15 dB)")
