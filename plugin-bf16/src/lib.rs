//! The BF16 precision plugin for mxhost, the baseline the MX plugins are compared with:
//! grouped GEMM on operands rounded to bf16 (round to nearest even; bf16 inputs as
//! they are) with f32 accumulation. It does not quantize and accepts no MX operands.
//!
//! - [`gemm`]: the operand preparation (rounding to bf16).
//! - [`backend`]: per-device dispatch: CPU, and CUDA through cuBLAS (feature `cuda`,
//!   the default; see `backend::cuda` for the GPU design).
//! - [`abi`]: the exported `mxhost_plugin_entry` table.
//!
//! The expert loop, layouts, padding and output conversion are the shared driver in
//! `mxhost_plugin_common::gemm`, the same one the MXFP8 plugin uses.

pub mod abi;
pub mod backend;
pub mod gemm;

pub use abi::mxhost_plugin_entry;
