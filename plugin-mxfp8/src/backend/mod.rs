//! The backend boundary: one place that maps the device a request's tensors live on to
//! the code that runs it. CPU is built in; a CUDA backend (cudarc + NVRTC) goes in
//! `cuda.rs` and a HIP one in `hip.rs`, each implementing
//! [`mxhost_plugin_common::entry::Backend`], and gets a match arm in [`select`].

pub mod cpu;

use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_abi::DeviceKind;
use mxhost_plugin_common::entry::{device_unavailable, Backend};

/// The backend for `device`, or Unsupported ("CUDA backend not built/available").
pub fn select(device: DeviceKind) -> PluginResult<&'static dyn Backend> {
    match device {
        DeviceKind::Cpu => Ok(&cpu::CpuBackend),
        other => Err(device_unavailable(other)),
    }
}
