//! The exported C ABI: the static function table. `grouped_gemm` goes through the
//! shared validation and device dispatch; `quantize`/`dequantize` answer Unsupported
//! at once (this plugin has no QUANTIZE capability).

use crate::backend::{self, cpu::NO_QUANTIZE};
use mxhost_plugin_abi::{
    caps, static_cstr, DequantizeDesc, ErrorBuf, GroupedGemmDesc, PluginApi, QuantizeDesc,
};
use mxhost_plugin_common::entry;

const NAME: &std::ffi::CStr = c"bf16";
const PRECISION: &std::ffi::CStr = c"BF16 operands, FP32 accumulation";
const VERSION: &std::ffi::CStr = static_cstr(concat!(env!("CARGO_PKG_VERSION"), "\0"));

/// What this plugin implements.
pub const CAPABILITIES: u64 = caps::GROUPED_GEMM
    | caps::DENSE_OPERANDS
    | caps::DEVICE_CPU
    | if cfg!(feature = "cuda") {
        caps::DEVICE_CUDA
    } else {
        0
    };

static API: PluginApi = PluginApi::new(
    NAME,
    PRECISION,
    VERSION,
    CAPABILITIES,
    quantize,
    dequantize,
    grouped_gemm,
);

unsafe extern "C" fn quantize(_desc: *const QuantizeDesc, err: *mut ErrorBuf) -> u32 {
    entry::unsupported(err, NO_QUANTIZE)
}

unsafe extern "C" fn dequantize(_desc: *const DequantizeDesc, err: *mut ErrorBuf) -> u32 {
    entry::unsupported(err, NO_QUANTIZE)
}

unsafe extern "C" fn grouped_gemm(desc: *const GroupedGemmDesc, err: *mut ErrorBuf) -> u32 {
    // SAFETY: the host passes null or valid pointers, offs valid for num_groups reads.
    unsafe { entry::grouped_gemm(desc, err, backend::select) }
}

/// The plugin's single exported symbol: the static function table.
#[no_mangle]
pub extern "C" fn mxhost_plugin_entry() -> *const PluginApi {
    &API
}
