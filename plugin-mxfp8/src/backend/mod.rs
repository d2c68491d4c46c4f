//! The backend boundary: one place that maps the device a request's tensors live on to
//! the code that runs it. CPU is built in; a CUDA backend (cudarc + NVRTC) goes in
//! `cuda.rs` and a HIP one in `hip.rs`, each implementing
//! [`mxhost_plugin_common::entry::Backend`], and gets a match arm in [`select`].

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cublas;
#[cfg(feature = "cuda")]
pub mod cublas_tune;
#[cfg(feature = "cuda")]
pub mod cuda;

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

/// Whether forward and dgrad can take the chained GEMM on a GPU in this process
/// (`MXHOST_MX_CHAIN=on` or `always`, or the default `auto` where a device fills annexes;
/// false without the `cuda` feature, under `off`, or when the variable holds something
/// else, which the GEMM calls themselves report).
pub fn chained_gemm_requested() -> bool {
    #[cfg(feature = "cuda")]
    {
        cuda::chained_gemm_requested()
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}
