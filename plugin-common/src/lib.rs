//! Code shared by mxhost's native precision plugins (`mxfp8`, `bf16`, and later ones).
//!
//! Every plugin has the same outer shape: an ABI entry reads a descriptor, validates it
//! without trusting anything it points at, picks a backend for the device the tensors
//! live on, and (on the CPU) runs a grouped GEMM whose expert loop, weight layouts,
//! padding rows and output conversion do not depend on the precision. Only the operand
//! preparation differs (MXFP8 quantize-dequantize, BF16 rounding), so that is the one
//! thing a plugin supplies; the rest lives here so the plugins cannot drift apart.
//!
//! - [`args`]: device-agnostic validated views of the ABI descriptors (raw pointers
//!   plus checked shapes and enums), what a backend receives.
//! - [`host`]: turning a validated host-memory tensor into a Rust slice.
//! - [`dense`]: f32/bf16 element handling (bf16 round-to-nearest-even).
//! - [`gemm`]: the CPU grouped-GEMM driver (rayon + `matrixmultiply`).
//! - [`entry`]: the [`entry::Backend`] trait and the panic-safe ABI entry helpers.
//! - `cuda` (feature `cuda`): library probes, the primary context, cuBLAS handles.
//! - [`staging`]: small host-to-device copies through a pinned ring (`upload` with `cuda`).
//! - [`switch`]: the plugins' boolean environment switches.
//! - `testing` (feature `testing`): RNG and f64 references for the plugins' tests.

pub mod args;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod dense;
pub mod entry;
pub mod gemm;
pub mod host;
pub mod staging;
pub mod switch;
#[cfg(feature = "testing")]
pub mod testing;

pub use mxhost_plugin_abi as abi;
