//! Grouped GEMM: the request's operands brought to the K-major FP8 layouts the kernels read
//! ([`AMat`], [`BMat`]: quantizing dense ones, transposing where needed), the choice between
//! the FP8 kernels and the dequantize-to-BF16 path, and the kernel launch ([`launch_gemm`]:
//! `mx_tgemm_*` or `mx_gemm_*`). Wgrad is in [`super::wgrad`].

use super::bf16_path::{dequantize_into, gemm_rows_bf16, Bf16Weight};
use super::bytes_on_demand::{self, LeftOut};
use super::chain::{self, Gate};
use super::chain_annex::{AnnexRole, Annexes};
use super::chain_form;
use super::chain_memory;
use super::chain_quant;
use super::cublas;
use super::device::{gemm_smem, tgemm_smem, Call};
use super::params::{GemmParams, QuantParams, TGemmParams, TGemmParamsO};
use super::tma::{out_map, tgemm_params};
use super::wgrad::wgrad;
use super::{arg, cdiv, fmt_code, i32_of, mode_code, ptr, rup, COLS, TILE, TILE_T};
use crate::kernels::{self, Unit};
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{DType, GemmPass, WeightLayout};
use mxhost_plugin_common::args::{Blocking, GemmArgs, MxArg, OperandArg, TensorArg};
use std::sync::OnceLock;

/// `MX_MAX_E` of the kernels: experts per grouped launch.
const MAX_E: usize = 1024;

/// A-side operand ready for the GEMM: FP8 `[rows][red]` (K-major) and E8M0 scales
/// `[ceil(rows/rdiv)][ceil(red/32)]`.
#[derive(Clone, Copy)]
pub(super) struct AMat {
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) fmt: u8,
    /// Rows per scale row: 1 (1×32 blocks along the reduction), 32 (32×32 tiles).
    pub(super) rdiv: i32,
}

/// The A operand of forward/dgrad as the caller passed it: pre-quantized (1×32 along the
/// reduction or 32×32 tiles), or dense values to quantize with the call's format and
/// scale mode.
pub(super) enum RowsA {
    Mx(AMat),
    /// The exact MX values in bf16 `[rows][red]`, kept by quantize (dequantize-to-BF16
    /// path only).
    Values(u64),
    Dense {
        x: u64,
        in_bf16: bool,
        fmt: u8,
        mode: i32,
    },
}

impl RowsA {
    /// The FP8 operand the kernels read: as passed, or the first `rows` rows of the dense
    /// values quantized 1×32 along `red` into this call's scratch.
    pub(super) fn quantized(&self, call: &mut Call, rows: usize, red: usize) -> PluginResult<AMat> {
        match *self {
            RowsA::Mx(a) => Ok(a),
            RowsA::Values(_) => Err(PluginError::invalid(
                "CUDA backend: the FP8 kernels need the FP8 bytes, not the bf16 values",
            )),
            RowsA::Dense {
                x,
                in_bf16,
                fmt,
                mode,
            } => {
                let q = call.alloc(rows * red)?;
                let s = call.alloc(rows * cdiv(red, 32))?;
                call.quant_rows(x, in_bf16, rows, red, fmt, mode, q, s)?;
                Ok(AMat { q, s, fmt, rdiv: 1 })
            }
        }
    }
}

/// B-side operand: FP8 `[E][cols][red]` (K-major) and E8M0 scales read as
/// `s[e*ise + rb*isr + cb*isc]` (rb = reduction block, cb = column or column block).
pub(super) struct BMat {
    pub(super) q: u64,
    pub(super) s: u64,
    pub(super) ise: i64,
    pub(super) isr: i64,
    pub(super) isc: i64,
    pub(super) w2d: bool,
    pub(super) fmt: u8,
}

pub(super) fn unsupported_layout(pass: &str, role: &str, m: &MxArg, want: &str) -> PluginError {
    let got = match Blocking::from_abi(m.block) {
        Some(Blocking::Vector { axis }) => format!("1×32 blocks along axis {axis}"),
        Some(Blocking::Tile) => "32×32 tiles".into(),
        None => "an unknown layout".into(),
    };
    PluginError::unsupported(format!(
        "CUDA backend: {pass} with a pre-quantized {role} in {got} (shape {:?}) is not supported on the GPU; it needs {want}. Pass the operand dense (quantized in the call) or use --device cpu",
        m.data.shape
    ))
}

pub(super) fn gemm(call: &mut Call, args: &GemmArgs) -> PluginResult<()> {
    let e = args.offs.len();
    let (rows, n, k) = (args.rows, args.n, args.k);
    let out = &args.out;
    if out.numel == 0 {
        return Ok(());
    }
    if e > MAX_E {
        return Err(PluginError::unsupported(format!(
            "CUDA backend: {e} experts exceed the kernels' limit of {MAX_E} per call"
        )));
    }
    let out_bf16 = out.dtype == DType::Bf16;
    let esz = out.dtype.size_bytes() as usize;
    let (red, pass_name) = match args.pass {
        GemmPass::Forward => (k, "forward"),
        GemmPass::Dgrad => (n, "dgrad"),
        GemmPass::Wgrad => (0, "wgrad"),
    };
    // Degenerate requests: nothing to multiply → zeros (exactly what the math says).
    if e == 0 || (args.pass != GemmPass::Wgrad && red == 0) || args.offs[e - 1] == 0 {
        return call.zero(ptr(out), out.numel * esz);
    }
    if args.pass != GemmPass::Wgrad && red % 16 != 0 {
        return Err(PluginError::unsupported(format!(
            "CUDA backend: {pass_name} needs its reduction length ({}) to be a multiple of 16 (16-byte FP8 rows for the tensor cores); got {red}. Use --device cpu for this shape",
            if args.pass == GemmPass::Forward { "K" } else { "N" }
        )));
    }
    i32_of("rows", rows)?;
    i32_of("n", n)?;
    i32_of("k", k)?;
    let dense_fmt = || args.format();
    let dense_mode = || args.mode().map(mode_code);
    match args.pass {
        GemmPass::Forward | GemmPass::Dgrad => {
            let fwd = args.pass == GemmPass::Forward;
            let cols = if fwd { n } else { k };
            if cols % 2 != 0 {
                return Err(PluginError::unsupported(format!(
                    "CUDA backend: {pass_name} needs an even number of output columns (the epilogue stores pairs); got {cols}. Use --device cpu for this shape"
                )));
            }
            // ---- A: [rows][red], 1×32 along red or 32×32 tiles ----
            let a = match &args.a {
                OperandArg::Dense(t) => RowsA::Dense {
                    x: ptr(t),
                    in_bf16: t.dtype == DType::Bf16,
                    fmt: fmt_code(dense_fmt()?),
                    mode: dense_mode()?,
                },
                // 1×32 along the reduction, or 32×32 tiles (scales [rows/32][red/32]: the
                // same per-row scale for 32 rows, expanded where the GEMM reads it).
                OperandArg::Mx(m) => match Blocking::from_abi(m.block) {
                    Some(b @ (Blocking::Vector { axis: 1 } | Blocking::Tile)) => RowsA::Mx(AMat {
                        q: ptr(&m.data),
                        s: ptr(&m.scales),
                        fmt: fmt_code(m.format),
                        rdiv: if b == Blocking::Tile { 32 } else { 1 },
                    }),
                    _ => {
                        return Err(unsupported_layout(
                            pass_name,
                            if fwd { "X" } else { "dY" },
                            m,
                            "1×32 blocks along its last axis or 32×32 tiles",
                        ))
                    }
                },
            };
            // Operands quantized with their values kept (ABI 1.2): bf16 the cuBLAS path reads
            // as they are. A's must be [rows][red]; W's either stored layout.
            let a_vals = match &args.a {
                OperandArg::Mx(m) => m.values.as_ref().filter(|v| !v.swapped).map(|v| ptr(&v.t)),
                OperandArg::Dense(_) => None,
            };
            let b_vals = match &args.b {
                OperandArg::Mx(m) => m.values.as_ref().map(|v| {
                    if stored_is_kmajor(args, fwd) != v.swapped {
                        Bf16Weight::KMajor(ptr(&v.t))
                    } else {
                        Bf16Weight::StoredRedMajor(ptr(&v.t))
                    }
                }),
                OperandArg::Dense(_) => None,
            };
            let groups = args.groups();
            let rows_per_expert: Vec<usize> = groups.iter().map(|g| g.len()).collect();
            // With the weight's values at hand the BF16 path skips the weight's expansion
            // (and with A's too it is cuBLAS alone): faster than the FP8 kernel on every
            // anchor shape (docs/perf.md runs 70-73; cuBLAS dense 1.15-1.26x torch against
            // the FP8 kernel's 1.02-1.12x, A's pass costing at most 3 B per element).
            // MXHOST_MX_CHAIN=on|always keeps a GEMM the chained kernel can take on the FP8
            // path (the auto rule would send a and b to cuBLAS), unless the weight's values
            // are kept: cuBLAS on them beat the chained pipeline by 1.3-1.9x (run 105). Under
            // `auto` (the default) only operands quantized for a GEMM, both with annexes, do.
            let chain_mode = chain::mode()?;
            let annexed = annex_of(&args.a).is_some() && annex_of(&args.b).is_some();
            let chain_fits =
                chain_mode.applies(annexed) && chain::shape_refusal(e, rows, cols).is_none();
            // The gate memory (`on`): an operand whose last chained GEMM closed its gate has
            // no annex filled (an MX operand) or no form made (a dense bf16 A): the default
            // path takes the GEMM, as with the chain off.
            let dense_a_key = match &args.a {
                OperandArg::Dense(t) if chain_fits && t.dtype == DType::Bf16 => Some(
                    chain_memory::OperandKey::new(call, ptr(t), AnnexRole::A { rows, red }, false),
                ),
                _ => None,
            };
            let unfilled = |o: &OperandArg| {
                annex_of(o).is_some_and(|t| matches!(chain_memory::annex(ptr(t)), Some((_, false))))
            };
            let remembered_closed = chain_fits
                && (unfilled(&args.a)
                    || unfilled(&args.b)
                    || dense_a_key.is_some_and(|k| !chain_memory::wants_annex(chain_mode, k)));
            if remembered_closed && gemm_trace() {
                eprintln!("mxhost-plugin-mxfp8: chained GEMM not taken (M {rows} N {cols} K {red} E {e}): an operand's last chained GEMM closed its gate, so its annex was not filled (gate memory; tried again every {}th call)", chain_memory::REPROBE_EVERY);
            }
            let chain_wanted = chain_fits && !remembered_closed;
            // A's bytes, if its quantize call left them out (ABI 1.7): written before any
            // kernel here reads them, gated like the per-k32 kernel where it is gated.
            let a_left_out = bytes_on_demand::left_out_of(&args.a)?;
            // B's bytes (a weight quantized with its transposed copy): read by the kernels here
            // only where `weights` re-lays them out, on the BF16 path, where the chained GEMM
            // re-encodes them, and by the per-k32 kernel; written before the first of those,
            // gated like the last. (The chained GEMM's corrections read its partner's bytes
            // where that partner's form cannot stand in for them, and those are stored.)
            let mut b_left_out = bytes_on_demand::left_out_of(&args.b)?;
            if let (Some(l), false) = (b_left_out, stored_is_kmajor(args, fwd)) {
                l.write_before_read(call, None)?;
                b_left_out = None;
            }
            let via_bf16 = call.dev.portable
                || match cublas::rows_path()? {
                    cublas::GemmPath::Fp8 => false,
                    cublas::GemmPath::DequantBf16 => true,
                    cublas::GemmPath::Auto => {
                        b_vals.is_some()
                            || (!chain_wanted
                                && cublas::bf16_rows_faster(&rows_per_expert, cols, red))
                    }
                };
            if via_bf16 {
                if let (Some(l), None) = (a_left_out, a_vals) {
                    l.write_before_read(call, None)?;
                }
                if let (Some(l), false) = (b_left_out, b_vals.is_some()) {
                    l.write_before_read(call, None)?;
                }
                // A pre-quantized weight whose stored last axis is not the reduction:
                // expanded where it is (cuBLAS reads it transposed) instead of transposed
                // to K-major first. Everything else goes through `weights` (quantizing
                // dense weights, checking layouts) and is expanded K-major.
                let b_kept = b_vals.is_some();
                let b = match &args.b {
                    _ if b_kept => b_vals.expect("checked"),
                    OperandArg::Mx(m)
                        if !stored_is_kmajor(args, fwd)
                            && matches!(
                                Blocking::from_abi(m.block),
                                Some(Blocking::Tile) | Some(Blocking::Vector { axis: 1 })
                            ) =>
                    {
                        let t = call.alloc(e * n * k * 2)?;
                        dequantize_into(call, m, t, true)?;
                        Bf16Weight::StoredRedMajor(t)
                    }
                    // 1×32 along the stored last axis (the reduction), a whole number of
                    // blocks: fake-quantized to bf16 in one pass.
                    OperandArg::Dense(w)
                        if !args.weight_blocks_2d
                            && stored_is_kmajor(args, fwd)
                            && red.is_multiple_of(32)
                            && ptr(w).is_multiple_of(16) =>
                    {
                        let t = call.alloc(e * cols * red * 2)?;
                        let (fmt, mode) = (fmt_code(dense_fmt()?), dense_mode()?);
                        let bf = w.dtype == DType::Bf16;
                        if call.fakequant_rows(ptr(w), bf, e * cols, red, fmt, mode, t)? {
                            Bf16Weight::KMajor(t)
                        } else {
                            // (scratch not 16-byte aligned: two passes)
                            Bf16Weight::Fp8(weights(call, args, fwd, cols, red, e)?)
                        }
                    }
                    _ => Bf16Weight::Fp8(weights(call, args, fwd, cols, red, e)?),
                };
                let a = match a_vals {
                    Some(v) => RowsA::Values(v),
                    None => a,
                };
                let dims = (rows, cols, red);
                return gemm_rows_bf16(call, &a, &b, out, &groups, dims, out_bf16, b_kept);
            }
            let b = weights(call, args, fwd, cols, red, e)?;
            // A dense bf16 A that the chained GEMM will take: quantized with its chain form
            // in one pass (chain_quant), the form read like an annex.
            let dims = (e, rows, cols, red);
            let form = match chain_wanted {
                true => chain_quant::quantize_dense_a(call, &a, &b, out_bf16, dims)?,
                false => None,
            };
            let (a, a_form) = match form {
                Some((a, base)) => (a, Some(base)),
                None => (a.quantized(call, rows, red)?, None),
            };
            let offs_dev = offsets_on_device(call, args)?;
            let gate = if !chain_wanted {
                None
            } else {
                // The stored weight is B's bytes transposed when its last axis is not this
                // pass's reduction (the kernels read the transposed copy `weights` made).
                let bt = match &args.b {
                    OperandArg::Mx(m)
                        if !stored_is_kmajor(args, fwd) && ptr(&m.data).is_multiple_of(16) =>
                    {
                        Some(ptr(&m.data))
                    }
                    _ => None,
                };
                // A's annex describes the tensor passed; a dense A was quantized here.
                let mut annexes = Annexes::pick(
                    (annex_of(&args.a), annex_of(&args.b)),
                    &b,
                    stored_is_kmajor(args, fwd),
                    dims,
                );
                if a_form.is_some() {
                    annexes.a = annexes.a.or(a_form);
                    annexes.dense_a = dense_a_key;
                }
                // (an operand without a form it can read is re-encoded from its bytes)
                if let (Some(l), None) = (a_left_out, annexes.a) {
                    l.write_before_read(call, None)?;
                }
                if let (Some(l), None) = (b_left_out, annexes.b) {
                    l.write_before_read(call, None)?;
                    b_left_out = None;
                }
                match chain::launch_chained(
                    call,
                    chain_mode,
                    &a,
                    &b,
                    bt,
                    (ptr(out), out_bf16),
                    offs_dev,
                    dims,
                    annexes,
                )? {
                    Ok((gate, name)) => {
                        if gemm_trace() {
                            let from = |annex: bool| {
                                if annex {
                                    "annex"
                                } else {
                                    "re-encoded in the call"
                                }
                            };
                            let b_from = match annexes.b {
                                Some((_, chain_form::BtAt::Partner)) => {
                                    "annex referring to the partner tensor"
                                }
                                b => from(b.is_some()),
                            };
                            eprintln!("mxhost-plugin-mxfp8: GEMM {name} (M {rows} N {cols} K {red} E {e}, chained; A {}, B {b_from}; the per-k32 kernel below runs instead if the re-encoding reports overflow, NaN/Inf or more than {} residuals)", from(annexes.a.is_some()), gate.limit);
                        }
                        Some(gate)
                    }
                    Err(why) => {
                        if gemm_trace() {
                            eprintln!("mxhost-plugin-mxfp8: chained GEMM not taken (M {rows} N {cols} K {red} E {e}): {why}");
                        }
                        None
                    }
                }
            };
            gemm_rows(
                call,
                (&a, a_left_out),
                (&b, b_left_out),
                out,
                offs_dev,
                (e, rows, cols, red),
                out_bf16,
                gate,
            )?;
            if let (Some(g), true) = (gate, gemm_trace()) {
                eprintln!("mxhost-plugin-mxfp8: {}", g.report(call)?);
            }
            Ok(())
        }
        GemmPass::Wgrad => {
            for o in [&args.a, &args.b] {
                if let Some(l) = bytes_on_demand::left_out_of(o)? {
                    l.write_before_read(call, None)?;
                }
            }
            wgrad(call, args, out_bf16)
        }
    }
}

/// An MX operand's annex (ABI 1.3), if the host passed one.
fn annex_of(o: &OperandArg) -> Option<&TensorArg> {
    match o {
        OperandArg::Mx(m) => m.annex.as_ref(),
        OperandArg::Dense(_) => None,
    }
}

/// The expert offsets in device memory, for the FP8 kernels (the dequantize-to-BF16 path
/// works from the host copy): the caller's device copy if it passed one, else uploaded.
pub(super) fn offsets_on_device(call: &mut Call, args: &GemmArgs) -> PluginResult<u64> {
    if !args.offs_device.is_null() {
        return Ok(args.offs_device as u64);
    }
    let host: Vec<i32> = args.offs.iter().map(|&o| o as i32).collect();
    let d = call.alloc(host.len() * 4)?;
    // SAFETY: `d` holds host.len() i32 (this call's scratch).
    unsafe { call.upload(d, &host) }?;
    Ok(d)
}

/// Whether the weight is "K-major for this pass": its stored last axis (`[E][N][K]`, or
/// `[E][K][N]` with `WeightLayout::Kn`) is the reduction axis (K forward, N dgrad).
fn stored_is_kmajor(args: &GemmArgs, fwd: bool) -> bool {
    fwd != (args.weight_layout == WeightLayout::Kn)
}

/// The weight operand of forward (cols = N, red = K) or dgrad (cols = K, red = N) as
/// a K-major `[E][cols][red]` FP8 tensor with its scales.
pub(super) fn weights(
    call: &mut Call,
    args: &GemmArgs,
    fwd: bool,
    cols: usize,
    red: usize,
    e: usize,
) -> PluginResult<BMat> {
    let (n, k) = (args.n, args.k);
    let kn = args.weight_layout == WeightLayout::Kn;
    // Stored shape [E][s1][s2]: Nk = [E][N][K], Kn = [E][K][N].
    let (s1, s2) = if kn { (k, n) } else { (n, k) };
    let stored_is_kmajor = stored_is_kmajor(args, fwd);
    let pass_name = if fwd { "forward" } else { "dgrad" };
    let rb = cdiv(red, 32);
    match &args.b {
        OperandArg::Dense(w) => {
            let fmt = fmt_code(args.format()?);
            let mode = mode_code(args.mode()?);
            let bf = w.dtype == DType::Bf16;
            let q = call.alloc(e * n * k)?;
            if args.weight_blocks_2d {
                let (c1b, c2b) = (cdiv(s1, 32), cdiv(s2, 32));
                let s = call.alloc(e * c1b * c2b)?;
                let mut p = QuantParams {
                    inp: ptr(w),
                    in_bs: (s1 * s2) as i64,
                    r: i32_of("rows", s1)?,
                    c: i32_of("cols", s2)?,
                    mode,
                    ..Default::default()
                };
                if stored_is_kmajor {
                    // TILE: q [E][s1=cols][s2=red], scales [E][cols/32][red/32].
                    p.flags = TILE;
                    p.qa = q;
                    p.sa = s;
                    p.qa_bs = (s1 * s2) as i64;
                    p.sa_bs = (c1b * c2b) as i64;
                    call.quant(bf, fmt, &p, c1b, e)?;
                    Ok(BMat {
                        q,
                        s,
                        ise: (c1b * c2b) as i64,
                        isr: 1,
                        isc: c2b as i64,
                        w2d: true,
                        fmt,
                    })
                } else {
                    // TILE_T: q [E][s2=cols][s1=red], scales [E][cols/32][red/32].
                    p.flags = TILE_T;
                    p.qt = q;
                    p.st = s;
                    p.qt_bs = (s1 * s2) as i64;
                    p.st_bs = (c1b * c2b) as i64;
                    p.ldt = i32_of("rows", s1)?;
                    p.ldst = c1b as i32;
                    call.quant(bf, fmt, &p, c1b, e)?;
                    Ok(BMat {
                        q,
                        s,
                        ise: (c1b * c2b) as i64,
                        isr: 1,
                        isc: c1b as i64,
                        w2d: true,
                        fmt,
                    })
                }
            } else if stored_is_kmajor {
                // ROWS over [E*cols][red]: scales [E][cols][rb].
                let s = call.alloc(e * cols * rb)?;
                call.quant_rows(ptr(w), bf, e * cols, red, fmt, mode, q, s)?;
                Ok(BMat {
                    q,
                    s,
                    ise: (cols * rb) as i64,
                    isr: 1,
                    isc: rb as i64,
                    w2d: false,
                    fmt,
                })
            } else {
                // COLS over [E][red][cols]: q [E][cols][red], scales [E][cols][rb].
                let s = call.alloc(e * cols * rb)?;
                let p = QuantParams {
                    inp: ptr(w),
                    in_bs: (s1 * s2) as i64,
                    r: i32_of("rows", s1)?,
                    c: i32_of("cols", s2)?,
                    flags: COLS,
                    mode,
                    qt: q,
                    st: s,
                    qt_bs: (s1 * s2) as i64,
                    st_bs: (cols * rb) as i64,
                    ldt: i32_of("rows", s1)?,
                    ldst: rb as i32,
                    ..Default::default()
                };
                call.quant(bf, fmt, &p, cdiv(s1, 32), e)?;
                Ok(BMat {
                    q,
                    s,
                    ise: (cols * rb) as i64,
                    isr: 1,
                    isc: rb as i64,
                    w2d: false,
                    fmt,
                })
            }
        }
        OperandArg::Mx(m) => {
            let fmt = fmt_code(m.format);
            let block = Blocking::from_abi(m.block);
            // Scales along the reduction axis: vector along axis 2 if the stored last
            // axis is the reduction, else along axis 1.
            let red_axis = if stored_is_kmajor { 2 } else { 1 };
            let w2d = match block {
                Some(Blocking::Tile) => true,
                Some(Blocking::Vector { axis }) if axis == red_axis => false,
                _ => {
                    return Err(unsupported_layout(
                        pass_name,
                        "weight",
                        m,
                        &format!(
                            "32×32 tiles or 1×32 blocks along its reduction axis (axis {red_axis} of this [E, {}, {}] weight)",
                            if kn { "K" } else { "N" },
                            if kn { "N" } else { "K" }
                        ),
                    ))
                }
            };
            let q = if stored_is_kmajor {
                ptr(&m.data)
            } else {
                let t = call.alloc(e * n * k)?;
                call.transpose(ptr(&m.data), t, e, s1, s2)?;
                t
            };
            // Stored scale tensor [E][d1][d2] with (d1, d2) following the stored axes.
            let (d1, d2) = match (w2d, stored_is_kmajor) {
                (true, _) => (cdiv(s1, 32), cdiv(s2, 32)),
                (false, true) => (s1, cdiv(s2, 32)),
                (false, false) => (cdiv(s1, 32), s2),
            };
            let ise = (d1 * d2) as i64;
            // Reduction blocks index the axis of `red`: d2 when K-major, else d1.
            let (isr, isc) = if stored_is_kmajor {
                (1, d2 as i64)
            } else {
                (d2 as i64, 1)
            };
            Ok(BMat {
                q,
                s: ptr(&m.scales),
                ise,
                isr,
                isc,
                w2d,
                fmt,
            })
        }
    }
}

/// forward/dgrad launch: out[rows][cols] = Σ A[rows][red] · B_e[cols][red]. With `gate`
/// (the chained kernel was enqueued before) the TMA kernels return at once when the chained
/// kernel took the GEMM; `mx_gemm_*` does not look, so it recomputes the same result.
/// `a_left_out`, `b_left_out`: A's and B's bytes (and scales) where their quantize calls left
/// some out, written before the tables and the per-k32 kernel read them, behind the same gate.
#[allow(clippy::too_many_arguments)]
fn gemm_rows(
    call: &mut Call,
    (a, a_left_out): (&AMat, Option<LeftOut>),
    (b, b_left_out): (&BMat, Option<LeftOut>),
    out: &TensorArg,
    offs: u64,
    (e, rows, cols, red): (usize, usize, usize, usize),
    out_bf16: bool,
    gate: Option<Gate>,
) -> PluginResult<()> {
    let kb = cdiv(red, 32);
    let kb4 = rup(kb, 4);
    let ldsb = if b.w2d {
        rup(cdiv(cols, 32), 4)
    } else {
        rup(cols, 128)
    };
    let c = if b.w2d { cdiv(cols, 32) } else { cols };
    let sa = call.alloc(Call::scales_f32_bytes(rows, kb4, 1))?;
    let sb = call.alloc(Call::scales_f32_bytes(kb4, ldsb, e))?;
    let p = GemmParams {
        a: a.q,
        lda: red as i64,
        b: b.q,
        ldb: red as i64,
        b_es: (cols * red) as i64,
        sa,
        ldsa: 4 * rows as i64,
        sb,
        ldsb: ldsb as i64,
        sb_es: (kb4 * ldsb) as i64,
        out: ptr(out),
        ldo: cols as i64,
        o_es: 0,
        offs,
        e: e as i32,
        m: rows as i32,
        n: cols as i32,
        k: red as i32,
        batched: 0,
        out_t: 0,
    };
    // The tables are the per-k32 kernel's alone: behind a gate it honours, they too are
    // skipped on the device when the chained kernel takes the output (mx_chain_took).
    let unit = Unit::TGemm {
        fa: a.fmt,
        fb: b.fmt,
        w2d: b.w2d,
        out_bf16,
    };
    let choice = tgemm_choice(call, unit, &p)?;
    let table_gate = gate.filter(|_| choice.is_ok());
    // (before the tables: a tensor whose scales were left out too, ABI 1.8, gets them here)
    for l in [a_left_out, b_left_out].into_iter().flatten() {
        l.write_before_read(call, table_gate)?;
    }
    call.scales_f32_into(
        sa,
        a.s,
        0,
        (kb as i64, a.rdiv),
        1,
        (rows, kb, rows, kb4, 1),
        true,
        table_gate,
    )?;
    call.scales_f32_into(
        sb,
        b.s,
        b.ise,
        (b.isr, 1),
        b.isc,
        (kb, c, kb4, ldsb, e),
        false,
        table_gate,
    )?;
    launch_chosen(call, (a.fmt, b.fmt, b.w2d, out_bf16), choice, &p, gate)
}

/// The kernel [`launch_gemm`] sends `p` to: a TMA kernel (`mx_tgemm_*`: its name and
/// parameters) unless `MXHOST_MX_GEMM_KERNEL=gemm` (`Err(None)`), the TMA kernels cannot take
/// `p` ([`tgemm_params`]) or the device cannot give one its shared memory (`Err(Some(why))`);
/// on `Err`, `mx_gemm_*` runs. Only the TMA kernels read a gate, so the per-k32 kernel's
/// tables may be gated only when this is `Ok` ([`gemm_rows`]).
fn tgemm_choice(
    call: &Call,
    unit: Unit,
    p: &GemmParams,
) -> PluginResult<Result<(String, TGemmParams), Option<String>>> {
    if gemm_family()? != GemmFamily::TGemm {
        return Ok(Err(None));
    }
    let name = unit.gemm_name().unwrap();
    let tp = match tgemm_params(call.dev, p) {
        Ok(tp) => tp,
        Err(why) => return Ok(Err(Some(why))),
    };
    if call.dev.func_opt(unit, &name)?.is_none() {
        return Ok(Err(Some(format!(
            "{name} needs more shared memory than the device gives a block"
        ))));
    }
    Ok(Ok((name, tp)))
}

/// Which grouped-GEMM kernel family `MXHOST_MX_GEMM_KERNEL` asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum GemmFamily {
    /// `mx_tgemm_*` (TMA, 128-byte swizzle; the default).
    TGemm,
    /// `mx_gemm_*` (cp.async).
    Gemm,
}

fn gemm_family() -> PluginResult<GemmFamily> {
    match std::env::var("MXHOST_MX_GEMM_KERNEL") {
        Err(_) => Ok(GemmFamily::TGemm),
        Ok(v) => match v.trim() {
            "" | "tgemm" => Ok(GemmFamily::TGemm),
            "gemm" => Ok(GemmFamily::Gemm),
            other => Err(PluginError::invalid(format!(
                "MXHOST_MX_GEMM_KERNEL={other:?}: expected `tgemm` (TMA kernels, the default) or `gemm` (cp.async kernels)"
            ))),
        },
    }
}

/// `MXHOST_MX_GEMM_TRACE=1`: one stderr line per GEMM launch (kernel, shape, fallback).
pub(crate) fn gemm_trace() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| super::env_flag("MXHOST_MX_GEMM_TRACE", false))
}

/// One grouped-GEMM launch: `mx_tgemm_*` unless `MXHOST_MX_GEMM_KERNEL=gemm` or the TMA
/// kernels cannot take `p` ([`tgemm_params`]), else `mx_gemm_*` (same math, same results).
pub(super) fn launch_gemm(
    call: &Call,
    fa: u8,
    fb: u8,
    w2d: bool,
    out_bf16: bool,
    p: &GemmParams,
    gate: Option<Gate>,
) -> PluginResult<()> {
    let unit = Unit::TGemm {
        fa,
        fb,
        w2d,
        out_bf16,
    };
    let choice = tgemm_choice(call, unit, p)?;
    launch_chosen(call, (fa, fb, w2d, out_bf16), choice, p, gate)
}

/// [`launch_gemm`] with its [`tgemm_choice`] already made (by a caller that needed it first).
fn launch_chosen(
    call: &Call,
    (fa, fb, w2d, out_bf16): (u8, u8, bool, bool),
    choice: Result<(String, TGemmParams), Option<String>>,
    p: &GemmParams,
    gate: Option<Gate>,
) -> PluginResult<()> {
    let grid = call.dev.sms as usize;
    let trace = gemm_trace();
    let shape = format!(
        "M {} N {} K {} E {} batched {}",
        p.m, p.n, p.k, p.e, p.batched
    );
    let unit = Unit::TGemm {
        fa,
        fb,
        w2d,
        out_bf16,
    };
    let fallback = match choice {
        Ok((name, mut tp)) => {
            if let Some(g) = gate {
                tp.gate = g.status;
                tp.limit = g.limit;
            }
            let smem = tgemm_smem(w2d, unit.tma_store());
            let block = (kernels::TGEMM_THREADS, 1, 1);
            if unit.tma_store() {
                let tm_o = out_map(p);
                if trace {
                    let how = if tm_o.is_some() {
                        "TMA store"
                    } else {
                        "register epilogue"
                    };
                    eprintln!("mxhost-plugin-mxfp8: GEMM {name} ({shape}, {how})");
                }
                let tpo = TGemmParamsO {
                    b: tp,
                    tm_o: tm_o.unwrap_or([0; 16]),
                    o_tma: tm_o.is_some() as i32,
                    _pad: [0; 60],
                };
                return call.launch(unit, &name, (grid, 1, 1), block, smem, &mut [arg(&tpo)]);
            }
            if trace {
                eprintln!("mxhost-plugin-mxfp8: GEMM {name} ({shape})");
            }
            return call.launch(unit, &name, (grid, 1, 1), block, smem, &mut [arg(&tp)]);
        }
        Err(why) => why,
    };
    let unit = Unit::Gemm {
        fa,
        fb,
        w2d,
        out_bf16,
    };
    let name = unit.gemm_name().unwrap();
    if trace {
        match &fallback {
            Some(why) => eprintln!(
                "mxhost-plugin-mxfp8: GEMM {name} ({shape}) [fallback from mx_tgemm: {why}]"
            ),
            None => eprintln!("mxhost-plugin-mxfp8: GEMM {name} ({shape})"),
        }
    }
    call.launch(
        unit,
        &name,
        (grid, 1, 1),
        (128 * (kernels::GEMM_NC + 1), 1, 1),
        gemm_smem(w2d),
        &mut [arg(p)],
    )
}
