//! The exported C ABI: the static function table and its entries (quantize, dequantize,
//! grouped GEMM, ABI 1.3's annex size and ABI 1.7's bytes on demand). Each entry
//! delegates to `mxhost_plugin_common::entry`, which catches panics, reads and
//! validates the descriptor and dispatches to [`crate::backend::select`].

use crate::backend;
use mxhost_plugin_abi::{
    caps, static_cstr, AnnexQuery, DequantizeDesc, ErrorBuf, FillBytesDesc, GroupedGemmDesc,
    PluginApi, QuantizeDesc,
};
use mxhost_plugin_common::entry;
use std::sync::OnceLock;

const NAME: &std::ffi::CStr = c"mxfp8";
const PRECISION: &std::ffi::CStr = c"MXFP8 (E4M3/E5M2, E8M0 scales)";
const VERSION: &std::ffi::CStr = static_cstr(concat!(env!("CARGO_PKG_VERSION"), "\0"));

/// What this plugin implements, whatever the process's settings.
pub const CAPABILITIES: u64 = caps::QUANTIZE
    | caps::GROUPED_GEMM
    | caps::MX_OPERANDS
    | caps::DENSE_OPERANDS
    | caps::DEVICE_CPU
    | if cfg!(feature = "cuda") {
        caps::DEVICE_CUDA
    } else {
        0
    };

/// [`CAPABILITIES`] plus what this process's settings add: [`caps::CHAINED_GEMM`] where
/// forward and dgrad can take the chained GEMM (`MXHOST_MX_CHAIN`, `auto` by default: on a
/// machine whose GPU fills annexes).
pub fn capabilities() -> u64 {
    CAPABILITIES
        | if backend::chained_gemm_requested() {
            caps::CHAINED_GEMM
        } else {
            0
        }
}

/// Built on the first `mxhost_plugin_entry` call, when the capabilities read the
/// environment.
static API: OnceLock<PluginApi> = OnceLock::new();

unsafe extern "C" fn quantize(desc: *const QuantizeDesc, err: *mut ErrorBuf) -> u32 {
    // SAFETY: the host passes null or valid pointers (ABI contract).
    unsafe { entry::quantize(desc, err, backend::select) }
}

unsafe extern "C" fn dequantize(desc: *const DequantizeDesc, err: *mut ErrorBuf) -> u32 {
    // SAFETY: the host passes null or valid pointers (ABI contract).
    unsafe { entry::dequantize(desc, err, backend::select) }
}

unsafe extern "C" fn grouped_gemm(desc: *const GroupedGemmDesc, err: *mut ErrorBuf) -> u32 {
    // SAFETY: the host passes null or valid pointers, offs valid for num_groups reads.
    unsafe { entry::grouped_gemm(desc, err, backend::select) }
}

unsafe extern "C" fn annex_words(
    query: *const AnnexQuery,
    words: *mut u64,
    err: *mut ErrorBuf,
) -> u32 {
    // SAFETY: the host passes null or valid pointers (ABI contract).
    unsafe { entry::annex_words(query, words, err, backend::select) }
}

unsafe extern "C" fn fill_bytes(desc: *const FillBytesDesc, err: *mut ErrorBuf) -> u32 {
    // SAFETY: the host passes null or valid pointers (ABI contract).
    unsafe { entry::fill_bytes(desc, err, backend::select) }
}

/// The plugin's single exported symbol: the function table, built once and kept for the
/// process.
#[no_mangle]
pub extern "C" fn mxhost_plugin_entry() -> *const PluginApi {
    API.get_or_init(|| {
        PluginApi::new(
            NAME,
            PRECISION,
            VERSION,
            capabilities(),
            quantize,
            dequantize,
            grouped_gemm,
        )
        .with_annex(annex_words)
        .with_fill_bytes(fill_bytes)
    })
}
