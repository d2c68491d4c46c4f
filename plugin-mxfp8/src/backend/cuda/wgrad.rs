//! Wgrad on the FP8 kernels (`MXHOST_MX_WGRAD=fp8`): both operands relaid to the GEMM's
//! padded transposed layout with 1×32 scales along M (quantized in the call, or shifted
//! exactly by `mx_wgrad_relayout`), then one batched GEMM launch, preceded by the chained
//! wgrad under `MXHOST_MX_CHAIN_WGRAD=1` ([`chain_wgrad`]; the two gated so that one computes
//! the output). The default dequantize-to-BF16 wgrad is [`wgrad_via_bf16`].

use super::bf16_path::{need_cublas, wgrad_via_bf16};
use super::chain_wgrad;
use super::cublas;
use super::device::Call;
use super::gemm::{gemm_trace, launch_gemm, offsets_on_device, unsupported_layout};
use super::params::{GemmParams, QuantParams};
use super::{arg, cdiv, fmt_code, i32_of, mode_code, ptr, rup, COLS, GRID_YZ_MAX};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{DType, WeightLayout};
use mxhost_plugin_common::args::{Blocking, GemmArgs, MxArg, OperandArg, TensorArg};

/// wgrad: out_e = dY_eᵀ · X_e over each expert's rows. Both operands go to the GEMM's
/// padded transposed layout `[P][Mpad]` with 1×32 scales along M:
/// - dense: quantized in the call per expert (`COLS`, grouped: blocks restart at each
///   expert, as the CPU backend does);
/// - pre-quantized (1×32 along axis 0, blocks from row 0): relaid exactly by
///   `mx_wgrad_relayout`, each expert shifted by `start_e % 32` so every block keeps its
///   scale; the GEMM sees `m_e + shift_e` rows per expert (the extra ones are zeros).
pub(super) fn wgrad(call: &mut Call, args: &GemmArgs, out_bf16: bool) -> PluginResult<()> {
    let (n, k, rows) = (args.n, args.k, args.rows);
    let e = args.offs.len();
    let groups = args.groups();
    // The chained wgrad, when asked for and the operands and shape fit, runs on the FP8 path.
    let chained = !call.dev.portable
        && chain_wgrad::enabled()?
        && fp8_path_takes(&args.a, &args.b)
        && chain_wgrad::refusal(call, wgrad_fmts(args)?, (e, n, k)).is_none();
    // The portable build has no FP8 kernel: always the dequantize-to-BF16 path.
    let via_bf16 = if call.dev.portable {
        need_cublas()?;
        true
    } else {
        !chained && cublas::wgrad_path()? != cublas::GemmPath::Fp8
    };
    if via_bf16 {
        return wgrad_via_bf16(call, args, &groups, out_bf16);
    }
    let starts: Vec<usize> = groups.iter().map(|g| g.start).collect();
    let sizes: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let offs = offsets_on_device(call, args)?;
    match (&args.a, &args.b) {
        (OperandArg::Dense(dy), OperandArg::Dense(x)) => {
            let mpad: usize = sizes.iter().map(|&m| rup(m, 128)).sum();
            let mp = mpad / 32;
            if mp > GRID_YZ_MAX {
                return Err(PluginError::unsupported(format!(
                    "CUDA backend: wgrad over {mpad} padded rows exceeds the quantizer's grid limit"
                )));
            }
            let fmt = fmt_code(args.format()?);
            let mode = mode_code(args.mode()?);
            let mut cols_t = |t: &TensorArg, p: usize| -> PluginResult<(u64, u64)> {
                let qt = call.alloc(p * mpad)?;
                let st = call.alloc(p * mp)?;
                let qp = QuantParams {
                    inp: ptr(t),
                    r: i32_of("rows", rows)?,
                    c: i32_of("cols", p)?,
                    flags: COLS,
                    mode,
                    qt,
                    st,
                    ldt: i32_of("padded rows", mpad)?,
                    ldst: mp as i32,
                    offs,
                    e: e as i32,
                    grouped_tiles: mp as i32,
                    ..Default::default()
                };
                call.quant(t.dtype == DType::Bf16, fmt, &qp, mp, 1)?;
                Ok((qt, st))
            };
            let dyq = cols_t(dy, n)?;
            let xq = cols_t(x, k)?;
            let ops = ((dyq.0, dyq.1, fmt), (xq.0, xq.1, fmt));
            wgrad_gemm(call, args, ops, mpad, offs, out_bf16, chained)
        }
        (OperandArg::Mx(dy), OperandArg::Mx(x)) => {
            for (m, what) in [(dy, "dY"), (x, "X")] {
                if Blocking::from_abi(m.block) != Some(Blocking::Vector { axis: 0 }) {
                    return Err(unsupported_layout(
                        "wgrad",
                        what,
                        m,
                        "1×32 blocks along M (axis 0), the axis wgrad contracts over",
                    ));
                }
            }
            // Shifted padded layout and the offsets the GEMM sees.
            let mut tbl: Vec<i32> = Vec::with_capacity(4 * e);
            let mut fake_offs: Vec<i32> = Vec::with_capacity(e);
            let (mut seg, mut cum) = (0usize, 0usize);
            for i in 0..e {
                let sh = if sizes[i] == 0 { 0 } else { starts[i] % 32 };
                let m2 = sizes[i] + sh;
                tbl.extend([seg, sh, starts[i], sizes[i]].map(|v| v as i32));
                cum += m2;
                fake_offs.push(i32_of("rows", cum)?);
                seg += rup(m2, 128);
            }
            let mpad = seg;
            i32_of("padded rows", mpad)?;
            let tbl_d = call.alloc(tbl.len() * 4)?;
            let offs_d = call.alloc(e * 4)?;
            // SAFETY: both buffers hold the copied i32s (this call's scratch).
            unsafe {
                call.upload(tbl_d, &tbl)?;
                call.upload(offs_d, &fake_offs)?;
            }
            let mut relayout = |m: &MxArg, p: usize| -> PluginResult<(u64, u64, u8)> {
                let qt = call.alloc(p * mpad)?;
                let st = call.alloc(p * (mpad / 32))?;
                let (q, s) = (ptr(&m.data), ptr(&m.scales));
                let (p32, e32, mpad32) = (i32_of("cols", p)?, e as i32, mpad as i32);
                call.launch(
                    Unit::Aux,
                    "mx_wgrad_relayout",
                    (mpad / 32, cdiv(p, 32), 1),
                    (32, 8, 1),
                    0,
                    &mut [
                        arg(&q),
                        arg(&s),
                        arg(&p32),
                        arg(&tbl_d),
                        arg(&e32),
                        arg(&qt),
                        arg(&st),
                        arg(&mpad32),
                    ],
                )?;
                Ok((qt, st, fmt_code(m.format)))
            };
            let dyq = relayout(dy, n)?;
            let xq = relayout(x, k)?;
            wgrad_gemm(call, args, (dyq, xq), mpad, offs_d, out_bf16, chained)
        }
        _ => Err(PluginError::unsupported(
            "CUDA backend: wgrad with one pre-quantized and one dense operand is not supported by the FP8 kernel (MXHOST_MX_WGRAD=fp8: their M blocks would not line up); the default dequantize-to-BF16 path takes it",
        )),
    }
}

/// The wgrad GEMM on padded transposed operands `(data [P][mpad], scales [P][mpad/32],
/// format)` for dY (P = N) and X (P = K): the FP8 path (`MXHOST_MX_WGRAD=fp8`); the
/// default dequantize-to-BF16 path is [`wgrad_via_bf16`].
fn wgrad_gemm(
    call: &mut Call,
    args: &GemmArgs,
    (dyq, xq): ((u64, u64, u8), (u64, u64, u8)),
    mpad: usize,
    offs: u64,
    out_bf16: bool,
    chained: bool,
) -> PluginResult<()> {
    let (n, k, e) = (args.n, args.k, args.offs.len());
    let mp = mpad / 32;
    // Output [E][N][K] (Nk) or [E][K][N] (Kn). GEMM rows × cols with out_t = 0 needs an
    // even column count; the transposed store has no such rule. Pick the orientation.
    let kn = args.weight_layout == WeightLayout::Kn;
    // (A = rows operand, B = cols operand, GEMM rows, GEMM cols, out_t)
    let (a, b, pr, qc, out_t) = match (kn, k % 2 == 0, n % 2 == 0) {
        (false, true, _) => (dyq, xq, n, k, 0),
        (false, false, _) => (xq, dyq, k, n, 1),
        (true, _, true) => (xq, dyq, k, n, 0),
        (true, _, false) => (dyq, xq, n, k, 1),
    };
    let sa = call.scales_f32(a.1, 0, (mp as i64, 1), 1, pr, mp, pr, mp, 1, true)?;
    let qp = rup(qc, 128);
    let sb = call.scales_f32(b.1, 0, (1, 1), mp as i64, mp, qc, mp, qp, 1, false)?;
    let (ldo, o_es) = if out_t == 1 {
        (pr as i64, (qc * pr) as i64)
    } else {
        (qc as i64, (pr * qc) as i64)
    };
    let p = GemmParams {
        a: a.0,
        lda: mpad as i64,
        b: b.0,
        ldb: mpad as i64,
        b_es: 0,
        sa,
        ldsa: 4 * pr as i64,
        sb,
        ldsb: qp as i64,
        sb_es: 0,
        out: ptr(&args.out),
        ldo,
        o_es,
        offs,
        e: e as i32,
        m: pr as i32,
        n: qc as i32,
        k: 0,
        batched: 1,
        out_t,
    };
    // The chained wgrad first (then this launch runs only if its gate stays closed).
    let gate = if chained {
        match chain_wgrad::launch(
            call,
            ((a.0, a.1), (b.0, b.1)),
            (p.out, out_bf16),
            offs,
            (e, pr, qc, mpad),
        )? {
            Ok(gate) => {
                if gemm_trace() {
                    eprintln!("mxhost-plugin-mxfp8: wgrad E={e} N={n} K={k}: chained (both operands re-encoded per row along M; the per-k32 kernel below runs instead if the re-encoding reports overflow, NaN/Inf or more than {} residuals)", gate.limit);
                }
                Some(gate)
            }
            Err(why) => {
                if gemm_trace() {
                    eprintln!(
                        "mxhost-plugin-mxfp8: chained wgrad not taken (E={e} N={n} K={k}): {why}"
                    );
                }
                None
            }
        }
    } else {
        None
    };
    launch_gemm(call, a.2, b.2, false, out_bf16, &p, gate)?;
    if let (Some(g), true) = (gate, gemm_trace()) {
        eprintln!("mxhost-plugin-mxfp8: {}", g.report(call)?);
    }
    Ok(())
}

/// Whether the FP8 path below takes these operands: both dense, or both pre-quantized 1×32
/// along M (the other combinations are the dequantize-to-BF16 path's alone).
fn fp8_path_takes(dy: &OperandArg, x: &OperandArg) -> bool {
    let along_m = |m: &MxArg| Blocking::from_abi(m.block) == Some(Blocking::Vector { axis: 0 });
    match (dy, x) {
        (OperandArg::Dense(_), OperandArg::Dense(_)) => true,
        (OperandArg::Mx(a), OperandArg::Mx(b)) => along_m(a) && along_m(b),
        _ => false,
    }
}

/// The element formats wgrad's operands will have on the FP8 path (dense ones are quantized
/// in the call to the call's format).
fn wgrad_fmts(args: &GemmArgs) -> PluginResult<(u8, u8)> {
    let of = |o: &OperandArg| -> PluginResult<u8> {
        Ok(match o {
            OperandArg::Dense(_) => fmt_code(args.format()?),
            OperandArg::Mx(m) => fmt_code(m.format),
        })
    };
    Ok((of(&args.a)?, of(&args.b)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};

    fn tensor() -> TensorArg {
        super::super::test_tensor(vec![64, 32], 0)
    }

    fn mx(block: BlockLayout) -> OperandArg {
        OperandArg::Mx(MxArg {
            data: tensor(),
            scales: tensor(),
            format: MxFormat::E4m3,
            mode: ScaleMode::Rceil,
            block,
            values: None,
            annex: None,
        })
    }

    /// The chained wgrad goes by the FP8 path, which takes two dense operands or two along M
    /// only (run 135: tile-quantized X and mixed operands reached it and failed).
    #[test]
    fn the_fp8_path_takes_two_dense_or_two_along_m_operands_only() {
        let dense = || OperandArg::Dense(tensor());
        let along_m = || mx(BlockLayout::vector(0));
        assert!(fp8_path_takes(&dense(), &dense()));
        assert!(fp8_path_takes(&along_m(), &along_m()));
        assert!(!fp8_path_takes(&along_m(), &mx(BlockLayout::tile())));
        assert!(!fp8_path_takes(&mx(BlockLayout::tile()), &along_m()));
        assert!(!fp8_path_takes(&along_m(), &dense()));
        assert!(!fp8_path_takes(&dense(), &along_m()));
        assert!(!fp8_path_takes(
            &mx(BlockLayout::vector(1)),
            &mx(BlockLayout::vector(1))
        ));
    }
}
