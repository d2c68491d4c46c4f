//! The MXFP8 precision plugin for mxhost: OCP Microscaling FP8 (E4M3/E5M2 elements,
//! E8M0 block scales) quantization, dequantization and grouped GEMM.
//!
//! - [`numerics`]: the exact CPU numerics (scale rules, element rounding, block layouts).
//! - [`gemm`]: how MX GEMM operands are prepared (canonical quantization per pass).
//! - [`backend`]: per-device dispatch (CPU; CUDA with the `cuda` feature, default on).
//! - `kernels` (feature `cuda`): the embedded CUDA sources and their NVRTC compilation.
//! - [`abi`]: the exported `mxhost_plugin_entry` table.
//!
//! Built as a `cdylib` for the host to load and as an `rlib` so tests and other Rust
//! code can call the numerics directly.

pub mod abi;
pub mod backend;
pub mod gemm;
#[cfg(feature = "cuda")]
pub mod kernels;
pub mod numerics;

pub use abi::mxhost_plugin_entry;
pub use numerics::{dequantize_mx, fake_quantize, quantize_mx, scale_count};
