//! FP8 element formats: exact encoding of a real value into an E4M3 or E5M2 byte and
//! decoding back.
//!
//! Encoding is round-to-nearest, ties-to-even, **saturating** to ±max normal (448 for
//! E4M3, 57344 for E5M2): a finite value never becomes NaN or Inf, as the MX spec
//! prescribes for the element conversion. Subnormals are produced exactly (E4M3 down to
//! 2^-9, E5M2 down to 2^-16) and the sign of zero is kept (a negative value that rounds
//! to zero gives the negative-zero byte 0x80). The encoder works on an `f64` because
//! the caller's quotient x·2^(127−b) of an f32 x by an E8M0 scale is exact in f64; it
//! then rounds once, with integer arithmetic on the f64 significand (no double
//! rounding, no dependence on the FPU rounding mode).
//!
//! Outside the block path: NaN encodes to the canonical NaN byte 0x7F (both formats),
//! ±Inf saturates to ±max like any value beyond range. The block quantizer never passes
//! non-finite values (it marks the whole block NaN instead; see `quantize`).
//!
//! Decoding uses 256-entry tables built at compile time: E4M3 0x7F/0xFF are NaN (it has
//! no Inf); E5M2 0x7C/0xFC are ±Inf and 0x7D–0x7F/0xFD–0xFF NaN.

use mxhost_plugin_abi::MxFormat;

/// The parameters of an FP8 element format.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ElemSpec {
    /// Explicit mantissa bits (3 for E4M3, 2 for E5M2).
    pub mbits: u32,
    /// Exponent bias (7, 15).
    pub bias: i32,
    /// Largest finite magnitude (448, 57344).
    pub max: f64,
    /// Byte of +max (0x7E, 0x7B).
    pub max_code: u8,
    /// The NaN byte this crate produces (0x7F in both formats).
    pub nan_code: u8,
    /// Exponent of the largest binade, `emax_elem` in the MX spec (8, 15).
    pub emax: i32,
}

impl ElemSpec {
    /// Unbiased exponent of the smallest normal binade (`1 − bias`); subnormals share it.
    pub const fn emin(&self) -> i32 {
        1 - self.bias
    }
}

pub const E4M3: ElemSpec = ElemSpec {
    mbits: 3,
    bias: 7,
    max: 448.0,
    max_code: 0x7E,
    nan_code: 0x7F,
    emax: 8,
};
pub const E5M2: ElemSpec = ElemSpec {
    mbits: 2,
    bias: 15,
    max: 57344.0,
    max_code: 0x7B,
    nan_code: 0x7F,
    emax: 15,
};

/// The spec of an ABI format.
pub const fn spec(format: MxFormat) -> &'static ElemSpec {
    match format {
        MxFormat::E4m3 => &E4M3,
        MxFormat::E5m2 => &E5M2,
    }
}

/// Encode `q` (already divided by the block scale) into an element byte: RNE,
/// saturating, subnormals exact, sign kept. Exact for every finite `f64`.
#[inline]
pub fn encode(q: f64, s: &ElemSpec) -> u8 {
    let bits = q.to_bits();
    let sign = ((bits >> 63) as u8) << 7;
    let a = f64::from_bits(bits & !(1u64 << 63));
    if a.is_nan() {
        return s.nan_code;
    }
    // Saturate: every value ≥ max would round to max or beyond it (beyond is out of the
    // format, and its code would even collide with NaN for E4M3).
    if a >= s.max {
        return sign | s.max_code;
    }
    let exp_field = ((bits >> 52) & 0x7FF) as i32;
    if exp_field == 0 {
        // Zero, or an f64 subnormal (< 2^-1022): far below half the smallest element
        // subnormal, so it rounds to a (signed) zero.
        return sign;
    }
    let e = exp_field - 1023;
    let sig = (bits & ((1u64 << 52) - 1)) | (1u64 << 52); // a = sig · 2^(e−52)
                                                          // Below the normal range the spacing stops shrinking: clamp to the subnormal binade.
    let e_eff = e.max(s.emin());
    // n = a / spacing with spacing = 2^(e_eff − mbits): a right shift of sig.
    let shift = (52 + e_eff - e - s.mbits as i32) as u32; // ≥ 52 − mbits
    let n = if shift >= 64 {
        0 // sig < 2^53 ≤ 2^(shift−1): below half a spacing
    } else {
        // Branch-free round-half-even of sig / 2^shift: adding (half − 1) plus the
        // kept part's lowest bit carries exactly when the dropped part exceeds half,
        // or equals half with an odd kept part. No overflow: sig < 2^53, shift ≤ 63.
        let lsb = (sig >> shift) & 1;
        (sig + ((1u64 << (shift - 1)) - 1) + lsb) >> shift
    };
    // Element codes are monotone in magnitude: subnormals are `n` (exponent field 0),
    // normals `((e_eff − emin + 1) << mbits) + (n − 2^mbits)`; both equal this, and a
    // rounding carry into the next binade lands on the right code. a < max, so the
    // result is at most max_code.
    let code = (((e_eff - s.emin()) as u64) << s.mbits) + n;
    sign | code as u8
}

/// Encode an f32 (no scale): `encode(x as f64, s)`.
#[inline]
pub fn encode_f32(x: f32, s: &ElemSpec) -> u8 {
    encode(x as f64, s)
}

/// Decode an element byte (compile-time arithmetic on the bit fields).
const fn decode_bits(code: u8, s: &ElemSpec) -> f32 {
    let sign = if code & 0x80 != 0 { 0x8000_0000u32 } else { 0 };
    let ebits = 7 - s.mbits;
    let e_field = ((code & 0x7F) >> s.mbits) as i32;
    let m = (code & ((1 << s.mbits) - 1)) as u32;
    let top = (1 << ebits) - 1;
    if e_field == top {
        // E4M3: only S.1111.111 is special (NaN); E5M2: the IEEE-like top binade.
        if s.mbits == 3 {
            if m == (1 << s.mbits) - 1 {
                return f32::from_bits(0x7FC0_0000);
            }
        } else if m == 0 {
            return f32::from_bits(sign | 0x7F80_0000);
        } else {
            return f32::from_bits(0x7FC0_0000);
        }
    }
    if e_field == 0 {
        if m == 0 {
            return f32::from_bits(sign);
        }
        // m · 2^(emin − mbits): normalise into an f32 (always a normal f32).
        let lead = 31 - m.leading_zeros() as i32; // position of the top set bit
        let exp = s.emin() - s.mbits as i32 + lead;
        let frac = (m & !(1 << lead)) << (23 - lead);
        return f32::from_bits(sign | (((exp + 127) as u32) << 23) | frac);
    }
    let exp = e_field - s.bias;
    f32::from_bits(sign | (((exp + 127) as u32) << 23) | (m << (23 - s.mbits)))
}

const fn table(s: &ElemSpec) -> [f32; 256] {
    let mut t = [0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = decode_bits(i as u8, s);
        i += 1;
    }
    t
}

static E4M3_TABLE: [f32; 256] = table(&E4M3);
static E5M2_TABLE: [f32; 256] = table(&E5M2);

/// The 256 decoded values of a format, indexed by byte.
#[inline]
pub fn decode_table(format: MxFormat) -> &'static [f32; 256] {
    match format {
        MxFormat::E4m3 => &E4M3_TABLE,
        MxFormat::E5m2 => &E5M2_TABLE,
    }
}

/// Decode one element byte to f32 (exact).
#[inline]
pub fn decode(code: u8, format: MxFormat) -> f32 {
    decode_table(format)[code as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e4(x: f64) -> u8 {
        encode(x, &E4M3)
    }
    fn e5(x: f64) -> u8 {
        encode(x, &E5M2)
    }

    #[test]
    fn e4m3_hand_checked_encodings() {
        assert_eq!(e4(448.0), 0x7E);
        assert_eq!(e4(-448.0), 0xFE);
        // 464 is the midpoint of 448 and 480; 480 is out of range: saturate.
        assert_eq!(e4(464.0), 0x7E);
        assert_eq!(e4(1e30), 0x7E);
        assert_eq!(e4(f64::INFINITY), 0x7E);
        assert_eq!(e4(1.0), 0x38); // exponent field 7
        assert_eq!(e4(1.125), 0x39);
        // 1.0625 is the tie between 1.0 (even) and 1.125: down.
        assert_eq!(e4(1.0625), 0x38);
        // 1.1875 is the tie between 1.125 (odd) and 1.25: up.
        assert_eq!(e4(1.1875), 0x3A);
        assert_eq!(e4(2f64.powi(-9)), 0x01); // smallest subnormal
        assert_eq!(e4(2f64.powi(-10)), 0x00); // half of it: tie to even zero
        assert_eq!(e4(1.5 * 2f64.powi(-9)), 0x02); // 1.5 ulp: tie to even 2
        assert_eq!(e4(-2f64.powi(-11)), 0x80); // sign of zero kept
        assert_eq!(e4(-0.0), 0x80);
        assert_eq!(e4(0.0), 0x00);
        assert_eq!(e4(7.0 * 2f64.powi(-9)), 0x07); // largest subnormal
        assert_eq!(e4(7.5 * 2f64.powi(-9)), 0x08); // rounds up into the first normal 2^-6
        assert_eq!(e4(2f64.powi(-6)), 0x08);
        assert_eq!(e4(240.0), 0x77);
        assert_eq!(e4(f64::NAN), 0x7F);
    }

    #[test]
    fn e5m2_hand_checked_encodings() {
        assert_eq!(e5(57344.0), 0x7B);
        assert_eq!(e5(61440.0), 0x7B); // tie with the out-of-range 65536: saturate
        assert_eq!(e5(-1e9), 0xFB);
        assert_eq!(e5(1.0), 0x3C);
        assert_eq!(e5(1.125), 0x3C); // tie between 1.0 (even) and 1.25
        assert_eq!(e5(1.375), 0x3E); // tie between 1.25 (odd) and 1.5
        assert_eq!(e5(2f64.powi(-16)), 0x01);
        assert_eq!(e5(2f64.powi(-17)), 0x00);
        assert_eq!(e5(3.0 * 2f64.powi(-17)), 0x02);
        assert_eq!(e5(2f64.powi(-14)), 0x04);
        assert_eq!(e5(-2f64.powi(-30)), 0x80);
    }

    #[test]
    fn decode_special_values() {
        assert!(decode(0x7F, MxFormat::E4m3).is_nan());
        assert!(decode(0xFF, MxFormat::E4m3).is_nan());
        assert_eq!(decode(0x7E, MxFormat::E4m3), 448.0);
        assert_eq!(decode(0x01, MxFormat::E4m3), 2f32.powi(-9));
        assert_eq!(decode(0x80, MxFormat::E4m3).to_bits(), (-0.0f32).to_bits());
        assert_eq!(decode(0x7C, MxFormat::E5m2), f32::INFINITY);
        assert_eq!(decode(0xFC, MxFormat::E5m2), f32::NEG_INFINITY);
        for c in [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF] {
            assert!(decode(c, MxFormat::E5m2).is_nan());
        }
        assert_eq!(decode(0x7B, MxFormat::E5m2), 57344.0);
        assert_eq!(decode(0x01, MxFormat::E5m2), 2f32.powi(-16));
        assert_eq!(decode(0x03, MxFormat::E5m2), 3.0 * 2f32.powi(-16));
    }

    #[test]
    fn every_finite_code_round_trips() {
        for format in [MxFormat::E4m3, MxFormat::E5m2] {
            let s = spec(format);
            for c in 0..=255u8 {
                let v = decode(c, format);
                if v.is_finite() {
                    assert_eq!(encode(v as f64, s), c, "{format:?} code {c:#04x} value {v}");
                }
            }
        }
    }
}
