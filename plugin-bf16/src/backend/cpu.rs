//! The CPU backend: grouped GEMM on bf16-rounded operands through the shared driver.

use crate::gemm::Bf16Prep;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::args::{DequantizeArgs, GemmArgs, QuantizeArgs};
use mxhost_plugin_common::entry::Backend;
use mxhost_plugin_common::gemm;

pub struct CpuBackend;

/// This plugin has no MX formats (the ABI entries answer before reaching a backend; this
/// keeps the backend honest if it is ever called directly).
pub const NO_QUANTIZE: &str =
    "the bf16 plugin does not quantize (no QUANTIZE capability); select the mxfp8 plugin";

impl Backend for CpuBackend {
    fn quantize(&self, _args: &QuantizeArgs) -> PluginResult<()> {
        Err(PluginError::unsupported(NO_QUANTIZE))
    }

    fn dequantize(&self, _args: &DequantizeArgs) -> PluginResult<()> {
        Err(PluginError::unsupported(NO_QUANTIZE))
    }

    fn grouped_gemm(&self, args: &GemmArgs) -> PluginResult<()> {
        // SAFETY: the args were parsed from the host's descriptor; the host allocated
        // numel × size bytes for each tensor and keeps them alive for this call, and the
        // output was checked not to overlap the inputs.
        unsafe { gemm::run_on_host(args, &Bf16Prep) }
    }
}
