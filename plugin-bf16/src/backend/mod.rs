//! The backend boundary: the device a request's tensors live on picks the code that
//! runs it. CPU is built in; CUDA (cuBLAS) with the `cuda` feature (the default).
//!
//! - [`cpu`]: the shared rayon driver on bf16-rounded operands.
//! - [`cuda`] (feature `cuda`): cuBLAS on the host's stream, all experts of a pass in one
//!   strided-batched or grouped-batched call where cuBLAS allows.
//! - [`plan`]: the row-major → column-major mapping and its grouping into batches of one
//!   shape that the CUDA backend executes (pure Rust, unit-tested against the CPU driver
//!   without a GPU).
//! - [`convert`]: the f32 → bf16 (RNE) conversion kernel source and its Rust mirror.

pub mod convert;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod plan;

use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_abi::DeviceKind;
use mxhost_plugin_common::entry::{device_unavailable, Backend};

/// The backend for `device`, or Unsupported ("CUDA backend not built/available").
pub fn select(device: DeviceKind) -> PluginResult<&'static dyn Backend> {
    match device {
        DeviceKind::Cpu => Ok(&cpu::CpuBackend),
        #[cfg(feature = "cuda")]
        DeviceKind::Cuda => Ok(&cuda::CudaBackend),
        other => Err(device_unavailable(other)),
    }
}

/// Whether the CUDA driver library can be loaded (false without the `cuda` feature).
/// Tests use it to avoid sending host pointers to a real GPU backend.
pub fn cuda_driver_present() -> bool {
    #[cfg(feature = "cuda")]
    {
        cuda::driver_present()
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}
