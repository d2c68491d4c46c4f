//! The backend boundary: the device a request's tensors live on picks the code that
//! runs it. CPU is built in; CUDA/HIP backends slot in here beside it.

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
