//! Test support shared by this crate's integration tests: independent (slow,
//! obviously-correct) references for element encoding and block quantization, plus the
//! RNG and f64 grouped GEMM from `mxhost_plugin_common::testing`.
#![allow(dead_code)]

use mxhost_plugin_abi::{BlockKind, BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_mxfp8::numerics::e8m0::scale_byte;
use mxhost_plugin_mxfp8::numerics::element::{decode, spec};

#[allow(unused_imports)]
pub use mxhost_plugin_common::testing::{reference_gemm, reference_with_bound, Rng};

pub const FORMATS: [MxFormat; 2] = [MxFormat::E4m3, MxFormat::E5m2];
pub const MODES: [ScaleMode; 3] = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];

/// Every finite non-negative value of a format with its byte, by brute force.
fn positive_codes(format: MxFormat) -> Vec<(f64, u8)> {
    (0u8..=0x7F)
        .map(|c| (decode(c, format) as f64, c))
        .filter(|(v, _)| v.is_finite())
        .collect()
}

/// Reference encoder: the nearest finite value by exhaustive search, ties to the code
/// with an even mantissa (the even byte), saturating at ±max, sign of the input kept.
pub fn reference_encode(q: f64, format: MxFormat) -> u8 {
    let s = spec(format);
    if q.is_nan() {
        return s.nan_code;
    }
    let sign = if q.is_sign_negative() { 0x80 } else { 0 };
    let a = q.abs();
    if a >= s.max {
        // Saturation: at or beyond max the nearest finite value is max (decided
        // explicitly; distances to far-away values are not exact in f64).
        return sign | s.max_code;
    }
    let mut best: Option<(f64, u8)> = None;
    for (v, c) in positive_codes(format) {
        let d = (v - a).abs();
        best = match best {
            None => Some((d, c)),
            Some((bd, bc)) if d < bd || (d == bd && c & 1 == 0 && bc & 1 == 1) => Some((d, c)),
            keep => keep,
        };
    }
    sign | best.unwrap().1
}

/// Index of the block (into the scale tensor) that element `idx` of `shape` belongs to,
/// by plain index arithmetic.
pub fn block_of(idx: usize, shape: &[u64], layout: BlockLayout) -> usize {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let rank = dims.len();
    let mut coord = vec![0usize; rank];
    let mut rem = idx;
    for ax in (0..rank).rev() {
        coord[ax] = rem % dims[ax];
        rem /= dims[ax];
    }
    let mut sdims = dims.clone();
    let mut scoord = coord.clone();
    match BlockKind::from_raw(layout.kind).unwrap() {
        BlockKind::Vector => {
            let ax = layout.axis as usize;
            sdims[ax] = dims[ax].div_ceil(32);
            scoord[ax] = coord[ax] / 32;
        }
        BlockKind::Tile32x32 => {
            for ax in [rank - 2, rank - 1] {
                sdims[ax] = dims[ax].div_ceil(32);
                scoord[ax] = coord[ax] / 32;
            }
        }
    }
    scoord
        .iter()
        .zip(&sdims)
        .fold(0, |acc, (&c, &d)| acc * d + c)
}

/// Reference block quantizer: gathers each block by [`block_of`], picks the scale with
/// the crate's (hand-tested) `scale_byte`, encodes with [`reference_encode`].
pub fn reference_quantize(
    x: &[f32],
    shape: &[u64],
    layout: BlockLayout,
    format: MxFormat,
    mode: ScaleMode,
) -> (Vec<u8>, Vec<u8>) {
    let nscales = mxhost_plugin_abi::scale_shape(shape, layout)
        .unwrap()
        .iter()
        .product::<u64>() as usize;
    let mut amax = vec![0f32; nscales];
    let mut bad = vec![false; nscales];
    let blocks: Vec<usize> = (0..x.len()).map(|i| block_of(i, shape, layout)).collect();
    for (i, &v) in x.iter().enumerate() {
        let b = blocks[i];
        if !v.is_finite() {
            bad[b] = true;
        } else if v.abs() > amax[b] {
            amax[b] = v.abs();
        }
    }
    let s = spec(format);
    let scales: Vec<u8> = (0..nscales)
        .map(|b| {
            if bad[b] {
                0xFF
            } else {
                scale_byte(amax[b], s, mode)
            }
        })
        .collect();
    let data = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let b = scales[blocks[i]];
            if b == 0xFF {
                s.nan_code
            } else {
                reference_encode(v as f64 * 2f64.powi(127 - b as i32), format)
            }
        })
        .collect();
    (data, scales)
}

/// All block layouts valid for a tensor of `rank` ≥ 2.
pub fn layouts(rank: usize) -> Vec<BlockLayout> {
    vec![
        BlockLayout::vector(rank as u32 - 1),
        BlockLayout::vector(rank as u32 - 2),
        BlockLayout::tile(),
    ]
}
