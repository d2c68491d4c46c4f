//! The exact MX numerics on the CPU: E8M0 scale selection ([`e8m0`]), FP8 element
//! encoding and decoding ([`element`]), block quantization over a tensor ([`quantize`])
//! and the chained GEMM's stage re-encoding ([`reencode`]). Every rule follows
//! `shared/notes/mx-numerics.md`; the choices that note leaves open (non-finite inputs,
//! zero blocks, tails) are documented in [`quantize`].

pub mod e8m0;
pub mod element;
pub mod quantize;
pub mod reencode;

pub use quantize::{
    dequantize_mx, fake_quantize, fake_quantize_row_segments, quantize_mx, scale_count,
};
