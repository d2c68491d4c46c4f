//! Block quantization of a row-major tensor into MX element bytes plus E8M0 scales, and
//! the inverse.
//!
//! A tensor of shape `[batch..., R, C]` is viewed as `batch` matrices of `R × C`
//! (rank 1 is one row). Blocks, as the ABI's `BlockLayout` says:
//! - vector along the last axis: 1×32 runs of a row; scales `[batch..., R, ⌈C/32⌉]`;
//! - vector along axis rank−2: 32×1 runs of a column; scales `[batch..., ⌈R/32⌉, C]`;
//! - 32×32 tiles over the last two axes; scales `[batch..., ⌈R/32⌉, ⌈C/32⌉]`.
//!
//! A block never crosses a matrix (batch) boundary. The last block along an axis whose
//! length is not a multiple of 32 covers only the remaining elements, exactly as if the
//! tensor were zero-padded (zeros do not change the amax).
//!
//! Per block: amax = max |x| (exact f32), scale byte b by the mode (see `e8m0`), then
//! each element is encoded from the exact f64 quotient x·2^(127−b) with RNE and
//! saturation (see `element`).
//!
//! Decided special rules:
//! - **Non-finite input**: if any element of a block is NaN or ±Inf, the block's scale
//!   byte is 0xFF (NaN) and every element byte is the format's NaN code 0x7F, so
//!   non-finite input never silently turns finite, and the GEMM propagates NaN.
//! - **All-zero block**: rceil and floor give b = 0 (2^−127), even gives b = 1; the
//!   elements are zeros with their signs kept.
//! - **Dequantize**: value = decode(byte) · 2^(b−127), computed in f32 and exact
//!   (element significands have ≤ 4 bits) unless it leaves the f32 range: that happens
//!   only for blocks whose amax is within an element step of `f32::MAX`, where a
//!   rounded-up element times the scale gives ±Inf. A 0xFF scale makes every element
//!   NaN; an E5M2 Inf byte (never produced here) decodes to ±Inf. bf16 output is the
//!   f32 value rounded to nearest even.
//!
//! Work is split with rayon over rows (vectors along the last axis) or over 32-row
//! slabs (column vectors and tiles).

use super::e8m0::{inverse_scale_f64, scale_byte, scale_value, NAN_SCALE};
use super::element::{decode_table, encode, spec, ElemSpec};
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{scale_shape, BlockKind, BlockLayout, MxFormat, ScaleMode, MX_BLOCK};
use mxhost_plugin_common::dense::DenseElem;
use rayon::prelude::*;

const B: usize = MX_BLOCK as usize;

/// Which way the blocks of a `[batch, R, C]` view run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Along {
    /// 1×32 along the last axis.
    Cols,
    /// 32×1 along axis rank−2.
    Rows,
    /// 32×32.
    Tiles,
}

/// A tensor shape and block layout, checked and reduced to `[batch, rows, cols]`.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    batch: usize,
    rows: usize,
    cols: usize,
    along: Along,
    numel: usize,
    scales: usize,
}

impl Geometry {
    fn new(shape: &[u64], layout: BlockLayout) -> PluginResult<Self> {
        let invalid = || {
            PluginError::invalid(format!(
                "block layout {layout:?} is invalid for shape {shape:?}"
            ))
        };
        let sshape = scale_shape(shape, layout).ok_or_else(invalid)?;
        let to_usize =
            |v: u64| usize::try_from(v).map_err(|_| PluginError::invalid("shape overflows usize"));
        let prod = |s: &[u64]| {
            s.iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .ok_or_else(|| PluginError::invalid("shape overflows"))
                .and_then(to_usize)
        };
        let rank = shape.len();
        let (batch, rows, cols) = if rank == 1 {
            (1, 1, to_usize(shape[0])?)
        } else {
            (
                prod(&shape[..rank - 2])?,
                to_usize(shape[rank - 2])?,
                to_usize(shape[rank - 1])?,
            )
        };
        let along = match BlockKind::from_raw(layout.kind).ok_or_else(invalid)? {
            BlockKind::Tile32x32 => Along::Tiles,
            BlockKind::Vector if layout.axis as usize == rank - 1 => Along::Cols,
            BlockKind::Vector => Along::Rows,
        };
        Ok(Geometry {
            batch,
            rows,
            cols,
            along,
            numel: prod(shape)?,
            scales: prod(&sshape)?,
        })
    }

    fn check_len(&self, what: &str, got: usize, want: usize) -> PluginResult<()> {
        if got != want {
            return Err(PluginError::invalid(format!(
                "{what} has {got} elements, expected {want}"
            )));
        }
        Ok(())
    }

    /// Elements and scales of one parallel unit: a row (Cols) or a 32-row slab.
    fn unit(&self) -> (usize, usize) {
        let nbc = self.cols.div_ceil(B);
        match self.along {
            Along::Cols => (self.cols, nbc),
            Along::Rows => (B * self.cols, self.cols),
            Along::Tiles => (B * self.cols, nbc),
        }
    }
}

/// Number of E8M0 scales for `shape` in `layout` (`None` if the layout is invalid).
pub fn scale_count(shape: &[u64], layout: BlockLayout) -> Option<usize> {
    Geometry::new(shape, layout).ok().map(|g| g.scales)
}

/// Run `f(input_unit, data_unit, scale_unit)` over the units in parallel. Slabs restart
/// at every matrix, so a batch's last slab may be shorter.
fn for_units<X: Sync, Y: Send, Z: Send>(
    g: &Geometry,
    xs: &[X],
    ys: &mut [Y],
    zs: &mut [Z],
    f: impl Fn(&[X], &mut [Y], &mut [Z]) + Sync,
) {
    if g.numel == 0 {
        return;
    }
    let (unit, sunit) = g.unit();
    // Keep tasks at a few thousand elements at least.
    let min_len = (4096 / unit.max(1)).max(1);
    match g.along {
        Along::Cols => xs
            .par_chunks(unit)
            .zip(ys.par_chunks_mut(unit))
            .zip(zs.par_chunks_mut(sunit))
            .with_min_len(min_len)
            .for_each(|((x, y), z)| f(x, y, z)),
        Along::Rows | Along::Tiles => {
            let mat = g.rows * g.cols;
            let smat = g.scales / g.batch;
            xs.par_chunks(mat)
                .zip(ys.par_chunks_mut(mat))
                .zip(zs.par_chunks_mut(smat))
                .for_each(|((x, y), z)| {
                    x.par_chunks(unit)
                        .zip(y.par_chunks_mut(unit))
                        .zip(z.par_chunks_mut(sunit))
                        .with_min_len(min_len)
                        .for_each(|((x, y), z)| f(x, y, z))
                })
        }
    }
}

/// Scale byte of a block from its running (amax, any-non-finite) state.
#[inline]
fn block_scale(amax: f32, bad: bool, s: &ElemSpec, mode: ScaleMode) -> u8 {
    if bad {
        NAN_SCALE
    } else {
        scale_byte(amax, s, mode)
    }
}

#[inline]
fn absmax_update(amax: &mut f32, bad: &mut bool, x: f32) {
    *bad |= !x.is_finite();
    *amax = amax.max(x.abs());
}

/// Encode a run of elements sharing scale byte `b`.
#[inline]
fn encode_run<T: DenseElem>(xs: &[T], b: u8, s: &ElemSpec, out: &mut [u8]) {
    if b == NAN_SCALE {
        out.fill(s.nan_code);
        return;
    }
    let inv = inverse_scale_f64(b);
    for (o, x) in out.iter_mut().zip(xs) {
        // Exact: an f32 times a power of two in [2^-127, 2^127] stays in f64 range.
        *o = encode(x.to_f32() as f64 * inv, s);
    }
}

/// Quantize `input` (row-major, `shape`) into `data_out` (one byte per element) and
/// `scales_out` (the ABI's `scale_shape`, row-major). Errors on an invalid layout or
/// buffer lengths that do not match the shape.
pub fn quantize_mx<T: DenseElem>(
    input: &[T],
    shape: &[u64],
    layout: BlockLayout,
    format: MxFormat,
    mode: ScaleMode,
    data_out: &mut [u8],
    scales_out: &mut [u8],
) -> PluginResult<()> {
    let g = Geometry::new(shape, layout)?;
    g.check_len("input", input.len(), g.numel)?;
    g.check_len("data_out", data_out.len(), g.numel)?;
    g.check_len("scales_out", scales_out.len(), g.scales)?;
    let s = spec(format);
    let cols = g.cols;
    match g.along {
        Along::Cols => for_units(&g, input, data_out, scales_out, |x, y, z| {
            for ((xb, yb), zb) in x.chunks(B).zip(y.chunks_mut(B)).zip(z.iter_mut()) {
                let (mut amax, mut bad) = (0f32, false);
                for v in xb {
                    absmax_update(&mut amax, &mut bad, v.to_f32());
                }
                *zb = block_scale(amax, bad, s, mode);
                encode_run(xb, *zb, s, yb);
            }
        }),
        Along::Rows => for_units(&g, input, data_out, scales_out, |x, y, z| {
            let mut amax = vec![0f32; cols];
            let mut bad = vec![false; cols];
            for row in x.chunks(cols) {
                for ((a, b), v) in amax.iter_mut().zip(bad.iter_mut()).zip(row) {
                    absmax_update(a, b, v.to_f32());
                }
            }
            for ((zb, a), b) in z.iter_mut().zip(&amax).zip(&bad) {
                *zb = block_scale(*a, *b, s, mode);
            }
            for (row, out) in x.chunks(cols).zip(y.chunks_mut(cols)) {
                for ((o, v), &b) in out.iter_mut().zip(row).zip(z.iter()) {
                    *o = if b == NAN_SCALE {
                        s.nan_code
                    } else {
                        encode(v.to_f32() as f64 * inverse_scale_f64(b), s)
                    };
                }
            }
        }),
        Along::Tiles => for_units(&g, input, data_out, scales_out, |x, y, z| {
            for (j, zb) in z.iter_mut().enumerate() {
                let (mut amax, mut bad) = (0f32, false);
                for row in x.chunks(cols) {
                    for v in &row[j * B..(j * B + B).min(cols)] {
                        absmax_update(&mut amax, &mut bad, v.to_f32());
                    }
                }
                *zb = block_scale(amax, bad, s, mode);
            }
            for (row, out) in x.chunks(cols).zip(y.chunks_mut(cols)) {
                for ((xb, yb), &b) in row.chunks(B).zip(out.chunks_mut(B)).zip(z.iter()) {
                    encode_run(xb, b, s, yb);
                }
            }
        }),
    }
    Ok(())
}

/// Expand `data` + `scales` (as produced by [`quantize_mx`] with the same shape and
/// layout) into `out`: decode(byte) · 2^(b−127), NaN for a 0xFF scale.
pub fn dequantize_mx<T: DenseElem>(
    data: &[u8],
    scales: &[u8],
    shape: &[u64],
    layout: BlockLayout,
    format: MxFormat,
    out: &mut [T],
) -> PluginResult<()> {
    let g = Geometry::new(shape, layout)?;
    g.check_len("data", data.len(), g.numel)?;
    g.check_len("scales", scales.len(), g.scales)?;
    g.check_len("out", out.len(), g.numel)?;
    let table = decode_table(format);
    let dec = |code: u8, scale: f32| T::from_f32_rne(table[code as usize] * scale);
    let cols = g.cols;
    // `for_units` hands out the scales mutably; dequantize only reads them, through a
    // private copy so the caller's buffer can stay shared.
    let mut scales = scales.to_vec();
    match g.along {
        Along::Cols => for_units(&g, data, out, &mut scales, |d, o, z| {
            for ((db, ob), &b) in d.chunks(B).zip(o.chunks_mut(B)).zip(z.iter()) {
                let sv = scale_value(b);
                for (o, &c) in ob.iter_mut().zip(db) {
                    *o = dec(c, sv);
                }
            }
        }),
        Along::Rows => for_units(&g, data, out, &mut scales, |d, o, z| {
            let sv: Vec<f32> = z.iter().map(|&b| scale_value(b)).collect();
            for (drow, orow) in d.chunks(cols).zip(o.chunks_mut(cols)) {
                for ((o, &c), &s) in orow.iter_mut().zip(drow).zip(&sv) {
                    *o = dec(c, s);
                }
            }
        }),
        Along::Tiles => for_units(&g, data, out, &mut scales, |d, o, z| {
            let sv: Vec<f32> = z.iter().map(|&b| scale_value(b)).collect();
            for (drow, orow) in d.chunks(cols).zip(o.chunks_mut(cols)) {
                for ((db, ob), &s) in drow.chunks(B).zip(orow.chunks_mut(B)).zip(&sv) {
                    for (o, &c) in ob.iter_mut().zip(db) {
                        *o = dec(c, s);
                    }
                }
            }
        }),
    }
    Ok(())
}

/// Quantize then dequantize (the values an MX GEMM multiplies), as f32.
pub fn fake_quantize<T: DenseElem>(
    input: &[T],
    shape: &[u64],
    layout: BlockLayout,
    format: MxFormat,
    mode: ScaleMode,
) -> PluginResult<Vec<f32>> {
    let g = Geometry::new(shape, layout)?;
    let mut data = vec![0u8; g.numel];
    let mut scales = vec![0u8; g.scales];
    quantize_mx(input, shape, layout, format, mode, &mut data, &mut scales)?;
    let mut out = vec![0f32; g.numel];
    dequantize_mx(&data, &scales, shape, layout, format, &mut out)?;
    Ok(out)
}

/// Quantize each row range of `segments` of a row-major `[rows, c]` tensor 1×32 along axis 0
/// as its own matrix (blocks start at the range's first row; its last block covers its
/// tail) and dequantize into `out` (same shape, f32, or bf16 rounded to nearest even). Rows
/// outside every range keep what `out` held. The ranges must be sorted and disjoint.
/// This is wgrad's quantization of a dense operand, one range per expert.
pub fn fake_quantize_row_segments<T: DenseElem, O: DenseElem + Send>(
    input: &[T],
    c: usize,
    segments: &[std::ops::Range<usize>],
    (format, mode): (MxFormat, ScaleMode),
    out: &mut [O],
) -> PluginResult<()> {
    if input.len() != out.len() || c == 0 || !input.len().is_multiple_of(c) {
        return Err(PluginError::invalid(format!(
            "fake_quantize_row_segments: {} input and {} output elements for rows of {c}",
            input.len(),
            out.len()
        )));
    }
    // Disjoint output slices, one per range.
    let mut pieces = Vec::with_capacity(segments.len());
    let (mut rest, mut at) = (&mut out[..], 0);
    for g in segments {
        if g.start < at || g.end < g.start || g.end * c > input.len() {
            return Err(PluginError::invalid(format!(
                "fake_quantize_row_segments: row range {g:?} is unsorted or out of bounds"
            )));
        }
        let (_, tail) = rest.split_at_mut((g.start - at) * c);
        let (piece, tail) = tail.split_at_mut(g.len() * c);
        pieces.push((g.clone(), piece));
        (rest, at) = (tail, g.end);
    }
    pieces.into_par_iter().try_for_each(|(g, piece)| {
        if g.is_empty() {
            return Ok(());
        }
        let shape = [g.len() as u64, c as u64];
        let layout = BlockLayout::vector(0);
        let mut data = vec![0u8; piece.len()];
        let mut scales = vec![0u8; g.len().div_ceil(MX_BLOCK as usize) * c];
        let x = &input[g.start * c..g.end * c];
        quantize_mx(x, &shape, layout, format, mode, &mut data, &mut scales)?;
        dequantize_mx(&data, &scales, &shape, layout, format, piece)
    })
}
