//! The exact stage re-encoding of an MX operand, on the CPU: the reference for the chained
//! GEMM's `mx_reencode_*` kernels (`cuda/include/mx_reencode.cuh`), which promote once per
//! 128-deep stage and so need one scale per stage.
//!
//! Each row's 1×32 blocks of a stage (k in `[128 s, 128 s + 128)`) move to the stage's largest
//! scale byte S: an element byte `b` of a block with scale byte `t` becomes the byte of
//! `decode(b) · 2^(t − S)` when that value is an element of the format, else the element is a
//! *residual*: 0 in the copy, its exact MX value in the residual list. So the original operand
//! equals copy + residuals element by element, and any product with it splits exactly into a
//! product with the copy plus a sparse one with the residuals. The kernels do the shift on the
//! element's integer multiple of the subnormal spacing; this module does it in f64 through the
//! crate's encoder, an independent route to the same bytes (the tests compare the two over
//! every byte and shift).

use super::e8m0::{scale_value, NAN_SCALE};
use super::element::{decode, encode, spec};
use mxhost_plugin_abi::MxFormat;

/// Elements per stage: four 1×32 blocks, the depth of one chained promotion.
pub const STAGE: usize = 128;

/// One element the stage scale cannot carry: its position and its exact MX value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Residual {
    pub row: usize,
    pub k: usize,
    pub value: f64,
}

/// A row-major operand `[rows][k]` with 1×32 scales `[rows][ceil(k / 32)]`, re-encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct StageUniform {
    pub bytes: Vec<u8>,
    /// The same layout as the input's scales; the four bytes of a stage are equal.
    pub scales: Vec<u8>,
    /// Row by row, k ascending (the kernels' list order).
    pub residuals: Vec<Residual>,
}

/// Why an operand has no stage-uniform form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReencodeError {
    /// A block of the stage holds a NaN/Inf (scale byte 0xFF).
    NonFinite { row: usize, stage: usize },
}

impl std::fmt::Display for ReencodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReencodeError::NonFinite { row, stage } => write!(
                f,
                "row {row}, stage {stage} holds a NaN/Inf block (scale byte 0xFF): no stage-uniform form"
            ),
        }
    }
}

impl std::error::Error for ReencodeError {}

/// `decode(code) · 2^−d` as an element byte of `format` when exact, else `None`.
pub fn shift_exact(code: u8, d: u32, format: MxFormat) -> Option<u8> {
    let v = decode(code, format) as f64;
    if d == 0 || v == 0.0 {
        return Some(code);
    }
    // d is a difference of scale bytes (< 255); 2^-300 keeps larger ones exact in f64 too
    let shifted = v * 2f64.powi(-(d.min(300) as i32));
    let b = encode(shifted, spec(format));
    (decode(b, format) as f64 == shifted).then_some(b)
}

/// Re-encode `bytes` `[rows][k]` with scales `[rows][ceil(k / 32)]` (E8M0) to one scale per
/// 128-deep stage and row.
pub fn reencode_rows(
    bytes: &[u8],
    scales: &[u8],
    rows: usize,
    k: usize,
    format: MxFormat,
) -> Result<StageUniform, ReencodeError> {
    let kb = k.div_ceil(32);
    assert_eq!(bytes.len(), rows * k, "bytes: [rows][k]");
    assert_eq!(scales.len(), rows * kb, "scales: [rows][ceil(k / 32)]");
    let mut out = StageUniform {
        bytes: vec![0; bytes.len()],
        scales: vec![0; scales.len()],
        residuals: Vec::new(),
    };
    for r in 0..rows {
        let srow = &scales[r * kb..(r + 1) * kb];
        for (stage, blocks) in srow.chunks(STAGE / 32).enumerate() {
            if blocks.contains(&NAN_SCALE) {
                return Err(ReencodeError::NonFinite { row: r, stage });
            }
            let top = *blocks.iter().max().unwrap();
            for (i, &t) in blocks.iter().enumerate() {
                let b = stage * 4 + i;
                out.scales[r * kb + b] = top;
                for kk in 32 * b..(32 * b + 32).min(k) {
                    let code = bytes[r * k + kk];
                    match shift_exact(code, (top - t) as u32, format) {
                        Some(c) => out.bytes[r * k + kk] = c,
                        None => out.residuals.push(Residual {
                            row: r,
                            k: kk,
                            value: decode(code, format) as f64 * scale_value(t) as f64,
                        }),
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::e8m0::scale_value;

    /// The kernels' route (`mx_fp8_shift_exact`): the magnitude as an integer multiple of
    /// the subnormal spacing, exact iff the low d bits are zero, the result re-assembled
    /// from its top bit.
    fn shift_by_units(code: u8, d: u32, format: MxFormat) -> Option<u8> {
        let mb = spec(format).mbits;
        let (e, m) = (
            ((code & 0x7F) >> mb) as u32,
            (code as u32) & ((1 << mb) - 1),
        );
        let units: u64 = if e == 0 {
            m as u64
        } else {
            ((1 << mb) + m as u64) << (e - 1)
        };
        let sign = code & 0x80;
        if d >= 64 {
            return (units == 0).then_some(sign);
        }
        if units & ((1u64 << d) - 1) != 0 {
            return None;
        }
        let j = units >> d;
        if j < (1 << mb) {
            return Some(sign | j as u8);
        }
        let h = 63 - j.leading_zeros();
        Some(sign | (((h - mb + 1) << mb) as u8) | ((j >> (h - mb)) - (1 << mb)) as u8)
    }

    #[test]
    fn both_routes_agree_on_every_finite_byte_and_shift() {
        for format in [MxFormat::E4m3, MxFormat::E5m2] {
            for code in 0u8..=255 {
                if !decode(code, format).is_finite() {
                    continue;
                }
                for d in 0..40 {
                    let (a, b) = (
                        shift_exact(code, d, format),
                        shift_by_units(code, d, format),
                    );
                    // -0 and +0 are the same value; the kernel keeps the sign byte
                    let same = a == b
                        || (a.is_some()
                            && b.is_some()
                            && decode(a.unwrap(), format) == 0.0
                            && decode(b.unwrap(), format) == 0.0);
                    assert!(
                        same,
                        "{format:?} byte {code:#04x} d {d}: f64 {a:?}, units {b:?}"
                    );
                }
            }
        }
    }

    fn value(bytes: &[u8], scales: &[u8], k: usize, r: usize, kk: usize, format: MxFormat) -> f64 {
        decode(bytes[r * k + kk], format) as f64
            * scale_value(scales[r * k.div_ceil(32) + kk / 32]) as f64
    }

    /// Random MX rows: element bytes of every binade and scale bytes that differ by up to
    /// `spread` within a stage (the source of residuals).
    fn operand(
        rows: usize,
        k: usize,
        spread: u8,
        seed: u64,
        format: MxFormat,
    ) -> (Vec<u8>, Vec<u8>) {
        let top = spec(format).max_code as u64 + 1;
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let bytes = (0..rows * k)
            .map(|_| (next() % top) as u8 | ((next() & 1) as u8) << 7)
            .collect();
        let scales = (0..rows * k.div_ceil(32))
            .map(|_| 100 + (next() % (spread as u64 + 1)) as u8)
            .collect();
        (bytes, scales)
    }

    #[test]
    fn copy_plus_residuals_is_the_operand_exactly_and_stages_are_uniform() {
        for (rows, k, spread, seed) in [
            (3, 128, 0, 1),
            (5, 2880, 6, 2),
            (4, 2064, 20, 3),
            (2, 48, 3, 4),
            (7, 4096, 2, 5),
        ] {
            for format in [MxFormat::E4m3, MxFormat::E5m2] {
                let (bytes, scales) = operand(rows, k, spread, seed, format);
                let u = reencode_rows(&bytes, &scales, rows, k, format).unwrap();
                let kb = k.div_ceil(32);
                for r in 0..rows {
                    for s in u.scales[r * kb..(r + 1) * kb].chunks(4) {
                        assert!(s.iter().all(|&b| b == s[0]), "stage scales {s:?}");
                    }
                }
                let mut res = vec![0.0f64; rows * k];
                for x in &u.residuals {
                    res[x.row * k + x.k] = x.value;
                    assert_eq!(decode(u.bytes[x.row * k + x.k], format), 0.0);
                }
                for r in 0..rows {
                    for kk in 0..k {
                        let (orig, copy) = (
                            value(&bytes, &scales, k, r, kk, format),
                            value(&u.bytes, &u.scales, k, r, kk, format),
                        );
                        assert_eq!(
                            copy + res[r * k + kk],
                            orig,
                            "row {r} k {kk} ({format:?}, spread {spread})"
                        );
                    }
                }
                let order: Vec<(usize, usize)> = u.residuals.iter().map(|x| (x.row, x.k)).collect();
                assert!(order.windows(2).all(|w| w[0] < w[1]), "row then k order");
                if spread == 0 {
                    assert!(
                        u.residuals.is_empty() && u.bytes == bytes,
                        "equal scales change nothing"
                    );
                } else if spread >= 6 {
                    assert!(
                        !u.residuals.is_empty(),
                        "spread {spread} should leave residuals"
                    );
                }
            }
        }
    }

    #[test]
    fn a_nan_block_has_no_stage_uniform_form() {
        let (bytes, mut scales) = operand(2, 256, 2, 9, MxFormat::E4m3);
        scales[8 + 5] = NAN_SCALE;
        assert_eq!(
            reencode_rows(&bytes, &scales, 2, 256, MxFormat::E4m3),
            Err(ReencodeError::NonFinite { row: 1, stage: 1 })
        );
    }
}
