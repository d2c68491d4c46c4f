//! High-precision element types that cross the ABI (f32 and bf16) and the one rounding
//! rule the plugins use to produce bf16: round to nearest, ties to even (RNE), NaN kept
//! NaN. `half`'s `bf16::from_f32` implements exactly that (checked in the tests), so it
//! is used rather than re-derived.

use half::bf16;
use mxhost_plugin_abi::DType;

/// An f32 or bf16 element: read as f32 exactly, written from f32 with RNE.
pub trait DenseElem: Copy + Send + Sync + 'static {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    fn from_f32_rne(x: f32) -> Self;
}

impl DenseElem for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline]
    fn from_f32_rne(x: f32) -> Self {
        x
    }
}

impl DenseElem for bf16 {
    const DTYPE: DType = DType::Bf16;
    #[inline]
    fn to_f32(self) -> f32 {
        // Widening bf16 -> f32 is exact (bf16 is the top half of an f32).
        bf16::to_f32(self)
    }
    #[inline]
    fn from_f32_rne(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

/// `x` rounded to the nearest bf16 (ties to even), returned as f32.
#[inline]
pub fn round_to_bf16(x: f32) -> f32 {
    bf16::from_f32(x).to_f32()
}

/// A read-only dense host tensor of either high-precision type.
#[derive(Debug, Clone, Copy)]
pub enum DenseRef<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
}

impl DenseRef<'_> {
    /// The values as f32 (exact for both types).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self {
            DenseRef::F32(s) => s.to_vec(),
            DenseRef::Bf16(s) => s.iter().map(|v| v.to_f32()).collect(),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            DenseRef::F32(s) => s.len(),
            DenseRef::Bf16(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A writable dense host tensor of either high-precision type.
#[derive(Debug)]
pub enum DenseMut<'a> {
    F32(&'a mut [f32]),
    Bf16(&'a mut [bf16]),
}

impl DenseMut<'_> {
    pub fn len(&self) -> usize {
        match self {
            DenseMut::F32(s) => s.len(),
            DenseMut::Bf16(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_is_nearest_even() {
        // 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7: ties to the even 1.0.
        assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8)), 1.0);
        // 1 + 3·2^-8 is the midpoint between 1 + 2^-7 (odd) and 1 + 2^-6: up.
        assert_eq!(
            round_to_bf16(1.0 + 3.0 * 2f32.powi(-8)),
            1.0 + 2f32.powi(-6)
        );
        // Just above a tie rounds up.
        assert_eq!(
            round_to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)),
            1.0 + 2f32.powi(-7)
        );
        assert!(round_to_bf16(f32::NAN).is_nan());
        assert_eq!(round_to_bf16(f32::INFINITY), f32::INFINITY);
        assert_eq!(round_to_bf16(-0.0).to_bits(), (-0.0f32).to_bits());
        // Overflow: the largest f32 rounds to +Inf in bf16 (RNE, no saturation).
        assert_eq!(round_to_bf16(f32::MAX), f32::INFINITY);
    }
}
