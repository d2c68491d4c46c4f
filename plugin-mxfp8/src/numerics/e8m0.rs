//! E8M0 scale selection: the shared power-of-two scale X = 2^(b−127) of one block,
//! chosen from the block's absolute maximum by one of three rules (see
//! `shared/notes/mx-numerics.md`, which this follows bit for bit).
//!
//! - **rceil** (default): the smallest power of two X with amax/X ≤ elem_max, computed
//!   on the FP32 bits of v = amax/elem_max as TE and torchao do; nothing saturates.
//! - **floor** (OCP MX v1.0): shared_exp = floor(log2 amax) − emax_elem, clamped below
//!   at −127; quotients up to 2·elem_max saturate.
//! - **even**: amax rounded half-up to the element's mantissa width on its FP32 bits,
//!   then its exponent − emax_elem, clamped below at b = 1 (the reference's choice).
//!
//! Inputs are a finite, non-negative f32 amax (subnormals handled exactly, no flush).
//! Non-finite blocks never get here: the quantizer gives them [`NAN_SCALE`].

use super::element::ElemSpec;
use mxhost_plugin_abi::ScaleMode;

/// The E8M0 NaN byte: every element of its block is NaN.
pub const NAN_SCALE: u8 = 0xFF;

/// The scale byte for a block with absolute maximum `amax` (finite, ≥ 0).
#[inline]
pub fn scale_byte(amax: f32, s: &ElemSpec, mode: ScaleMode) -> u8 {
    debug_assert!(amax.is_finite() && amax >= 0.0);
    match mode {
        ScaleMode::Rceil => rceil(amax, s),
        ScaleMode::Floor => floor(amax, s),
        ScaleMode::Even => even(amax, s),
    }
}

fn rceil(amax: f32, s: &ElemSpec) -> u8 {
    // FP32 division, as the recipe specifies (the reciprocal multiply agrees for 448
    // and 57344).
    let v = amax / s.max as f32;
    if v == 0.0 {
        return 0;
    }
    let bits = v.to_bits();
    let e = (bits >> 23) & 0xFF;
    let m = bits & 0x7F_FFFF;
    // Round the exponent up when v is not a power of two — except at the top binade
    // (no 0xFF scale for finite input) and for subnormal v ≤ 2^-127, which 2^-127
    // (b = 0) already covers.
    let bump = m > 0 && e != 0xFE && !(e == 0 && m <= 0x40_0000);
    (e + bump as u32) as u8
}

fn floor(amax: f32, s: &ElemSpec) -> u8 {
    if amax == 0.0 {
        return 0; // all-zero block: shared_exp = −127
    }
    let bits = amax.to_bits();
    let e = ((bits >> 23) & 0xFF) as i32;
    let log2 = if e == 0 {
        // Subnormal: amax = m · 2^-149, floor(log2) = index of m's top bit − 149.
        let m = bits & 0x7F_FFFF;
        (31 - m.leading_zeros() as i32) - 149
    } else {
        e - 127
    };
    let shared = log2 - s.emax;
    if shared > 127 {
        return super::e8m0::NAN_SCALE; // unreachable for f32 input (log2 ≤ 127, emax ≥ 8)
    }
    (shared.max(-127) + 127) as u8
}

fn even(amax: f32, s: &ElemSpec) -> u8 {
    let bits = amax.to_bits();
    // Half-up rounding at the element's last mantissa bit; a carry bumps the exponent.
    let r = (bits + (1u32 << (23 - s.mbits - 1))) & 0x7F80_0000;
    let b = (r >> 23) as i32 - s.emax;
    b.max(1) as u8 // ≤ 255 − 8: never the NaN byte
}

/// The scale value 2^(b−127) as f32 (b = 0 gives the subnormal 2^−127); NaN for 0xFF.
#[inline]
pub fn scale_value(b: u8) -> f32 {
    match b {
        NAN_SCALE => f32::NAN,
        0 => f32::from_bits(0x40_0000),
        _ => f32::from_bits((b as u32) << 23),
    }
}

/// 2^(127−b) as f64, the exact multiplier that divides by the scale (b ≠ 0xFF).
#[inline]
pub fn inverse_scale_f64(b: u8) -> f64 {
    debug_assert!(b != NAN_SCALE);
    f64::from_bits(((127 - b as i64 + 1023) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::super::element::{E4M3, E5M2};
    use super::*;

    fn all(amax: f32, s: &ElemSpec) -> [u8; 3] {
        [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even].map(|m| scale_byte(amax, s, m))
    }

    #[test]
    fn worked_examples_from_the_notes() {
        assert_eq!(all(448.0, &E4M3), [127, 127, 127]);
        assert_eq!(all(480.0, &E4M3), [128, 127, 127]);
        assert_eq!(all(496.0, &E4M3), [128, 127, 128]);
        assert_eq!(all(1.0, &E4M3), [119, 119, 119]);
    }

    #[test]
    fn zero_and_tiny_blocks() {
        assert_eq!(all(0.0, &E4M3), [0, 0, 1]);
        assert_eq!(all(0.0, &E5M2), [0, 0, 1]);
        let tiny = f32::from_bits(1); // 2^-149
                                      // rceil: v is subnormal far below 2^-127 → b = 0. floor: −149−8 clamps to −127.
        assert_eq!(all(tiny, &E4M3), [0, 0, 1]);
    }

    #[test]
    fn e5m2_examples() {
        // 57344 = elem_max: X = 1 for every rule.
        assert_eq!(all(57344.0, &E5M2), [127, 127, 127]);
        // 1.0: rceil needs X ≥ 1/57344 → 2^-15 (b 112); floor 0 − 15 → 112; even → 112.
        assert_eq!(all(1.0, &E5M2), [112, 112, 112]);
        // 1.875·2^15 = 61440: rceil → X = 2; floor → 1 (saturates); even rounds 1.875
        // to 2 (2 mantissa bits, half up) → 2^16 → b = 128.
        assert_eq!(all(61440.0, &E5M2), [128, 127, 128]);
    }

    #[test]
    fn rceil_covers_amax_and_is_tight() {
        for &amax in &[1e-30f32, 3.0e-38, 1.0, 447.9, 448.1, 1000.0, 3.4e38] {
            let b = scale_byte(amax, &E4M3, ScaleMode::Rceil);
            let x = 2f64.powi(b as i32 - 127);
            assert!(amax as f64 / x <= 448.0, "amax {amax} b {b}");
            if b > 0 {
                assert!(
                    amax as f64 / (x / 2.0) > 448.0,
                    "amax {amax} b {b} is not tight"
                );
            }
        }
    }

    #[test]
    fn scale_values() {
        assert_eq!(scale_value(127), 1.0);
        assert_eq!(scale_value(0), 2f32.powi(-127));
        assert_eq!(scale_value(254), 2f32.powi(127));
        assert!(scale_value(0xFF).is_nan());
        assert_eq!(inverse_scale_f64(0), 2f64.powi(127));
        assert_eq!(inverse_scale_f64(254), 2f64.powi(-127));
    }
}
