//! A test plugin whose misbehaviour is chosen by the `MXHOST_TEST_PLUGIN_MODE`
//! environment variable when the host loads it:
//! - `bad-magic`: a table with the wrong magic number;
//! - `abi-major`: ABI major 99;
//! - `short-table`: a `struct_size` smaller than the table;
//! - `null`: the entry returns null;
//! - `error` (default): a valid table whose every call fails with a message;
//! - `panic`: a valid table whose every call panics (caught at the boundary);
//! - `hang`: a valid table whose every call sleeps 20 s, then fails (for the watchdog).

use mxhost_plugin_abi::plugin_support::{guard_entry, PluginError};
use mxhost_plugin_abi::*;
use std::sync::OnceLock;

fn mode() -> String {
    std::env::var("MXHOST_TEST_PLUGIN_MODE").unwrap_or_else(|_| "error".into())
}

fn fail(err: *mut ErrorBuf) -> u32 {
    if mode() == "hang" {
        std::thread::sleep(std::time::Duration::from_secs(20));
    }
    let panics = mode() == "panic";
    guard_entry(err, || {
        if panics {
            panic!("test plugin panics on purpose");
        }
        Err(PluginError::backend("test plugin fails on purpose"))
    })
}

unsafe extern "C" fn quantize(_: *const QuantizeDesc, err: *mut ErrorBuf) -> u32 {
    fail(err)
}
unsafe extern "C" fn dequantize(_: *const DequantizeDesc, err: *mut ErrorBuf) -> u32 {
    fail(err)
}
unsafe extern "C" fn grouped_gemm(_: *const GroupedGemmDesc, err: *mut ErrorBuf) -> u32 {
    fail(err)
}

struct Table(PluginApi);
// SAFETY: immutable after construction; strings are static.
unsafe impl Sync for Table {}
unsafe impl Send for Table {}

static TABLE: OnceLock<Table> = OnceLock::new();

/// # Safety
/// Called by the host with no arguments.
#[no_mangle]
pub unsafe extern "C" fn mxhost_plugin_entry() -> *const PluginApi {
    let mode = mode();
    if mode == "null" {
        return std::ptr::null();
    }
    let table = TABLE.get_or_init(|| {
        let mut api = PluginApi::new(
            c"faulty",
            c"none (test fixture)",
            c"0",
            caps::QUANTIZE
                | caps::GROUPED_GEMM
                | caps::DENSE_OPERANDS
                | caps::MX_OPERANDS
                | caps::DEVICE_CPU,
            quantize,
            dequantize,
            grouped_gemm,
        );
        // The broken headers this fixture exists to produce.
        match mode.as_str() {
            "bad-magic" => api.magic = 0xDEAD_BEEF,
            "abi-major" => api.abi_major = 99,
            "short-table" => api.struct_size = 16,
            _ => {}
        }
        Table(api)
    });
    &table.0
}
