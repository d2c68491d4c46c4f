//! The dequantize-to-BF16 path of the CUDA backend: MX operands expanded to their exact
//! values in bf16 (`mx_dequantize16` / `mx_dequantize`; dense wgrad operands
//! fake-quantized by `mx_fakequant_m32_*`) and multiplied by cuBLAS with FP32 accumulation
//! ([`super::cublas`]). It runs wgrad by default, forward/dgrad where
//! [`super::cublas::bf16_rows_faster`] says so, and every GEMM of the portable build; the
//! products equal the FP8 kernels', only the summation order differs (docs/numerics.md).

use super::cublas;
use super::device::Call;
use super::gemm::{gemm_trace, BMat, RowsA};
use super::wgrad_values::{fakequant_m32, DeviceBlocks};
use super::{arg, cdiv, fmt_code, leading, mode_code, ptr, GRID_YZ_MAX};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::WeightLayout;
use mxhost_plugin_common::args::{Blocking, GemmArgs, MxArg, OperandArg, TensorArg};

/// Expand the MX tensor `i` (any block layout) into `out` (f32 or bf16, same shape,
/// device memory) with `mx_dequantize`.
pub(super) fn dequantize_into(
    call: &Call,
    i: &MxArg,
    out: u64,
    out_bf16: bool,
) -> PluginResult<()> {
    let shape = &i.data.shape;
    let rank = shape.len();
    let c = shape[rank - 1] as usize;
    let block = Blocking::from_abi(i.block)
        .ok_or_else(|| PluginError::invalid("dequantize.input: unknown block layout"))?;
    let (batch, r, rdiv, cdivv, srs, sbs) = match block {
        Blocking::Vector { axis } if axis + 1 == rank => {
            (1, i.data.numel / c.max(1), 1, 32, cdiv(c, 32), 0)
        }
        Blocking::Vector { axis } if axis + 2 == rank => {
            let r = shape[rank - 2] as usize;
            (leading(shape), r, 32, 1, c, cdiv(r, 32) * c)
        }
        Blocking::Tile if rank >= 2 => {
            let r = shape[rank - 2] as usize;
            (
                leading(shape),
                r,
                32,
                32,
                cdiv(c, 32),
                cdiv(r, 32) * cdiv(c, 32),
            )
        }
        other => {
            return Err(PluginError::invalid(format!(
                "dequantize: block layout {other:?} is invalid for rank {rank}"
            )))
        }
    };
    let layout = DequantLayout {
        batch,
        r,
        c,
        rdiv,
        cdiv: cdivv,
        srs,
        scs: 1,
        sbs,
    };
    call.dequant(
        ptr(&i.data),
        ptr(&i.scales),
        fmt_code(i.format),
        &layout,
        out,
        out_bf16,
    )
}

/// Where an MX tensor's scale bytes sit: element `[b][r][c]` (of `batch × r × c`) has
/// scale byte `b·sbs + (r / rdiv)·srs + (c / cdiv)·scs` (`mx_dequantize`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DequantLayout {
    batch: usize,
    r: usize,
    c: usize,
    rdiv: i32,
    cdiv: i32,
    srs: usize,
    scs: usize,
    sbs: usize,
}

impl DequantLayout {
    /// The same bytes as one batch of `batch·r` rows, when the batches' scale rows follow
    /// each other (whole row blocks, `sbs` = the row blocks' scale rows): then the fast
    /// `mx_dequantize16`, which has no batch stride, can take a batched tensor.
    fn flattened(&self) -> Option<DequantLayout> {
        let rdiv = self.rdiv.max(1) as usize;
        (self.batch > 1
            && self.scs == 1
            && self.r.is_multiple_of(rdiv)
            && self.sbs == self.r / rdiv * self.srs)
            .then(|| DequantLayout {
                batch: 1,
                r: self.batch * self.r,
                sbs: 0,
                ..*self
            })
    }
}

impl Call {
    /// FP8 `q` with E8M0 scales `s` laid out as `l` → f32 or bf16 `out` (same shape),
    /// exactly (bf16: round to nearest even, only reached below 2^-126).
    fn dequant(
        &self,
        q: u64,
        s: u64,
        fmt: u8,
        l: &DequantLayout,
        out: u64,
        out_bf16: bool,
    ) -> PluginResult<()> {
        let flat = l.flattened();
        let l = flat.as_ref().unwrap_or(l);
        let out_bf16: i32 = out_bf16 as i32;
        let fmt: i32 = fmt as i32;
        let (r64, c64, rdiv, cdivv) = (l.r as i64, l.c as i64, l.rdiv, l.cdiv);
        let (srs, sbs, scs) = (l.srs as i64, l.sbs as i64, l.scs as i64);
        // `mx_dequantize16` (16-element chunks, an exact hardware-conversion fast path) where
        // the layout allows; the per-element kernel (a 64-bit division per element) expanded
        // wgrad's operands at ~0.4 TB/s (docs/perf.md run 12). Same parameters;
        // `mx_dequantize16` has no batch stride (batch 1) and no column stride (scs 1).
        let by16 = l.batch == 1
            && l.scs == 1
            && l.c.is_multiple_of(16)
            && q.is_multiple_of(16)
            && out.is_multiple_of(16)
            && (cdivv == 32 || (s.is_multiple_of(16) && srs % 16 == 0));
        // mx_dequantize16: block 128, x = 16-element column chunks, y = rows, MXD_U = 2 rows
        // per thread and round.
        let (name, grid, block) = if by16 {
            (
                "mx_dequantize16",
                (cdiv(l.c / 16, 128), cdiv(l.r, 2).min(GRID_YZ_MAX), 1),
                128,
            )
        } else {
            (
                "mx_dequantize",
                (cdiv(l.r * l.c, 256).min(1 << 20), l.batch, 1),
                256,
            )
        };
        let mut params = [
            arg(&q),
            arg(&s),
            arg(&out),
            arg(&out_bf16),
            arg(&fmt),
            arg(&r64),
            arg(&c64),
            arg(&rdiv),
            arg(&cdivv),
            arg(&srs),
            arg(&sbs),
            arg(&scs),
        ];
        let n_params = if by16 { 10 } else { 12 };
        if gemm_trace() {
            eprintln!(
                "mxhost-mxfp8: dequantize {} x {} x {} with {name} (rdiv {rdiv} cdiv {cdivv} srs {srs} scs {scs} sbs {sbs})",
                l.batch, l.r, l.c
            );
        }
        self.launch(
            Unit::Aux,
            name,
            grid,
            (block, 1, 1),
            0,
            &mut params[..n_params],
        )
    }
}

/// The weight operand of forward/dgrad on the dequantize-to-BF16 path.
pub(super) enum Bf16Weight {
    /// FP8 `[E][cols][red]` with its scales ([`weights`]), to expand to bf16 K-major.
    ///
    /// [`weights`]: super::gemm::weights
    Fp8(BMat),
    /// Already bf16, as stored: `[E][red][cols]`.
    StoredRedMajor(u64),
    /// Already bf16, K-major: `[E][cols][red]` (a dense weight fake-quantized).
    KMajor(u64),
}

/// The dequantize-to-BF16 GEMMs need cuBLAS (the portable build has no other): Ok, or
/// Unsupported saying how to get it.
pub(super) fn need_cublas() -> PluginResult<()> {
    if cublas::cublas_present() {
        Ok(())
    } else {
        Err(PluginError::unsupported(
            "CUDA backend: this GEMM runs as dequantize-to-BF16 + cuBLAS (the portable build has no FP8 kernel), but libcublas.so.13 could not be loaded; add the CUDA 13 library directory to LD_LIBRARY_PATH",
        ))
    }
}

/// forward/dgrad as dequantize-to-BF16 (the portable build; on Hopper where
/// [`cublas::bf16_rows_faster`] says so): `out[rows][cols] = Σ A[rows][red] · B_e[cols][red]`
/// with both operands expanded to their exact MX values in bf16 (`mx_dequantize`) and
/// multiplied by cuBLAS with FP32 accumulation ([`cublas::rows_bf16`]); the same products
/// as the FP8 kernels, summed in another order. Rows past the last expert are zeroed, as
/// the FP8 kernels zero them.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_rows_bf16(
    call: &mut Call,
    a: &RowsA,
    b: &Bf16Weight,
    out: &TensorArg,
    groups: &[std::ops::Range<usize>],
    (rows, cols, red): (usize, usize, usize),
    out_bf16: bool,
    b_kept: bool,
) -> PluginResult<()> {
    need_cublas()?;
    let e = groups.len();
    let used = groups[e - 1].end;
    if gemm_trace() {
        let why = if call.dev.portable {
            format!("portable build, {}", call.dev.arch)
        } else {
            "faster than the FP8 kernel for GEMMs this large; MXHOST_MX_FWD_DGRAD=fp8 forces it"
                .to_string()
        };
        let kept = |yes: bool| if yes { "kept" } else { "expanded" };
        eprintln!(
            "mxhost-mxfp8: rows GEMM E={e} M={rows} N={cols} K={red} ({why}): MX values as bf16 + cuBLAS (A's {}, B's {})",
            kept(matches!(a, RowsA::Values(_))),
            kept(b_kept)
        );
    }
    let ab = match *a {
        RowsA::Values(v) => v,
        _ => call.alloc(used * red * 2)?,
    };
    // Dense values: fake-quantized in one pass where the flat kernel takes them.
    let expanded = match *a {
        RowsA::Values(_) => true,
        RowsA::Dense {
            x,
            in_bf16,
            fmt,
            mode,
        } => call.fakequant_rows(x, in_bf16, used, red, fmt, mode, ab)?,
        RowsA::Mx(_) => false,
    };
    if !expanded {
        let a = a.quantized(call, used, red)?;
        let a_layout = DequantLayout {
            batch: 1,
            r: used,
            c: red,
            rdiv: a.rdiv,
            cdiv: 32,
            srs: cdiv(red, 32),
            scs: 1,
            sbs: 0,
        };
        call.dequant(a.q, a.s, a.fmt, &a_layout, ab, true)?;
    }
    let (bb, b_red_major) = match *b {
        Bf16Weight::StoredRedMajor(t) => (t, true),
        Bf16Weight::KMajor(t) => (t, false),
        Bf16Weight::Fp8(ref b) => {
            // B's scale of (expert, column c, reduction index j) is s[e·ise + (c or
            // c/32)·isc + (j/32)·isr] (weights()).
            let bb = call.alloc(e * cols * red * 2)?;
            let b_layout = DequantLayout {
                batch: e,
                r: cols,
                c: red,
                rdiv: if b.w2d { 32 } else { 1 },
                cdiv: 32,
                srs: b.isc as usize,
                scs: b.isr as usize,
                sbs: b.ise as usize,
            };
            call.dequant(b.q, b.s, b.fmt, &b_layout, bb, true)?;
            (bb, false)
        }
    };
    let esz = if out_bf16 { 2 } else { 4 };
    if used < rows {
        call.zero(
            ptr(out) + (used * cols * esz) as u64,
            (rows - used) * cols * esz,
        )?;
    }
    let segs: Vec<(usize, usize)> = groups.iter().map(|g| (g.start, g.len())).collect();
    // SAFETY: `ab` holds rows 0..used of A and `bb` E·cols·red values, both bf16 in this
    // call's stream-ordered scratch (freed after the enqueued work); `out` holds rows·cols
    // outputs; every segment lies within 0..used; the stream is the call's.
    unsafe {
        cublas::rows_bf16(
            call.stream,
            ab,
            (bb, b_red_major),
            &segs,
            (cols, red),
            ptr(out),
            out_bf16,
        )
    }
}

/// wgrad on the dequantize-to-BF16 path: each operand becomes its MX values as bf16 in
/// `[rows][P]` — a dense one fake-quantized (`mx_fakequant_m32_*`: 1×32 blocks along M
/// restarting at each expert, bit-identical to quantize-then-dequantize), a
/// pre-quantized one dequantized (any block layout, e.g. X in 32×32 tiles) — and cuBLAS
/// multiplies them in place: no transposed or padded copy.
pub(super) fn wgrad_via_bf16(
    call: &mut Call,
    args: &GemmArgs,
    groups: &[std::ops::Range<usize>],
    out_bf16: bool,
) -> PluginResult<()> {
    let (n, k, rows) = (args.n, args.k, args.rows);
    let (dy, x) = (&args.a, &args.b);
    let fmt = fmt_code(args.format()?);
    let mode = mode_code(args.mode()?);
    let segs: Vec<(usize, usize)> = groups.iter().map(|g| (g.start, g.len())).collect();
    // Every expert empty: no operand is read, the output is zeroed.
    let (mut dyb, mut xb) = (0, 0);
    if groups.iter().any(|g| !g.is_empty()) {
        // The block table is only read by the fake-quantizer (dense operands not already
        // on the grid).
        let quantized_here =
            |o: &OperandArg, i: usize| matches!(o, OperandArg::Dense(_)) && !args.dense_on_grid[i];
        let blocks = if quantized_here(dy, 0) || quantized_here(x, 1) {
            DeviceBlocks::upload(call, groups)?
        } else {
            DeviceBlocks { table: 0, count: 0 }
        };
        let mut to_bf16 = |op: &OperandArg, p: usize, on_grid: bool| -> PluginResult<u64> {
            // Pre-quantized with its values kept ([rows][P]), or dense and already these
            // values (ABI 1.5, bf16 by the parser's check): read as they are.
            let t = match op {
                OperandArg::Mx(m) => {
                    if let Some(v) = m.values.as_ref().filter(|v| !v.swapped) {
                        return Ok(ptr(&v.t));
                    }
                    // Pre-quantized: its own MX values, whatever its block layout.
                    let out = call.alloc(rows * p * 2)?;
                    dequantize_into(call, m, out, true)?;
                    return Ok(out);
                }
                OperandArg::Dense(t) if on_grid => return Ok(ptr(t)),
                OperandArg::Dense(t) => t,
            };
            let out = call.alloc(rows * p * 2)?;
            fakequant_m32(call, t, out, &blocks, (rows, p), (fmt, mode))?;
            Ok(out)
        };
        dyb = to_bf16(dy, n, args.dense_on_grid[0])?;
        xb = to_bf16(x, k, args.dense_on_grid[1])?;
    }
    if gemm_trace() {
        eprintln!(
            "mxhost-mxfp8: wgrad E={} N={n} K={k}: MX values as bf16 (dense operands fake-quantized along M, pre-quantized ones dequantized, {} on the grid already) + cuBLAS (MXHOST_MX_WGRAD=fp8 for the FP8 kernel)",
            groups.len(),
            args.dense_on_grid.iter().filter(|&&g| g).count()
        );
    }
    // SAFETY: dyb/xb hold rows·N and rows·K bf16 values (allocated above on this stream;
    // rows outside every block are never read) or are unused (no live expert); the
    // segments are the experts' rows, within `rows`; the output is the host's buffer.
    unsafe {
        cublas::wgrad_bf16(
            call.stream,
            dyb,
            xb,
            &segs,
            (n, k),
            args.weight_layout == WeightLayout::Kn,
            ptr(&args.out),
            out_bf16,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batched layout flattens to one batch exactly when every element keeps its scale
    /// byte: batch b's scale rows must follow batch b-1's, in whole row blocks.
    #[test]
    fn dequant_layout_flattens_only_when_the_scale_index_is_kept() {
        // The portable GEMM's K-major weights: [E=3][cols=64][red=96], 32×32 blocks.
        let tile = DequantLayout {
            batch: 3,
            r: 64,
            c: 96,
            rdiv: 32,
            cdiv: 32,
            srs: 3,
            scs: 1,
            sbs: 6,
        };
        // 1×32 along the last axis: scales [E][cols][red/32].
        let rows = DequantLayout {
            rdiv: 1,
            srs: 3,
            sbs: 64 * 3,
            ..tile
        };
        for l in [tile, rows] {
            let f = l.flattened().expect("flattens");
            assert_eq!((f.batch, f.r, f.sbs), (1, l.batch * l.r, 0));
            let idx = |l: &DequantLayout, b: usize, r: usize, c: usize| {
                b * l.sbs + r / l.rdiv as usize * l.srs + c / l.cdiv as usize * l.scs
            };
            for b in 0..l.batch {
                for r in 0..l.r {
                    for c in (0..l.c).step_by(7) {
                        assert_eq!(idx(&l, b, r, c), idx(&f, 0, b * l.r + r, c), "{l:?}");
                    }
                }
            }
        }
        // A partial row block per batch, padded scale rows, a column stride, one batch.
        let ragged = DequantLayout {
            r: 50,
            sbs: 6,
            ..tile
        };
        assert_eq!(ragged.flattened(), None);
        assert_eq!(DequantLayout { sbs: 9, ..tile }.flattened(), None);
        assert_eq!(DequantLayout { scs: 2, ..tile }.flattened(), None);
        assert_eq!(DequantLayout { batch: 1, ..tile }.flattened(), None);
    }
}
