//! Calling through a plugin's function table: an error buffer for its message, the
//! status decoded, and descriptors built from host tensors.

use super::loader::LoadedPlugin;
use mxhost_plugin_abi::{DequantizeDesc, ErrorBuf, GroupedGemmDesc, QuantizeDesc, Status};

/// A plugin call that returned a non-OK status.
#[derive(Debug, Clone, thiserror::Error)]
#[error("plugin `{plugin}` failed ({status:?}): {message}")]
pub struct PluginCallError {
    pub plugin: String,
    pub status: Status,
    pub message: String,
}

const ERROR_CAPACITY: usize = 4096;

fn call(
    plugin: &LoadedPlugin,
    f: impl FnOnce(*mut ErrorBuf) -> u32,
) -> Result<(), PluginCallError> {
    let mut storage = vec![0u8; ERROR_CAPACITY];
    let mut buf = ErrorBuf {
        struct_size: std::mem::size_of::<ErrorBuf>(),
        data: storage.as_mut_ptr(),
        capacity: storage.len(),
        len: 0,
    };
    let raw = f(&mut buf);
    let status = Status::from_raw(raw);
    if status == Some(Status::Ok) {
        return Ok(());
    }
    let len = buf.len.min(ERROR_CAPACITY);
    let mut message = String::from_utf8_lossy(&storage[..len]).into_owned();
    if message.is_empty() {
        message = "no message".into();
    }
    Err(PluginCallError {
        plugin: plugin.name.clone(),
        status: status.unwrap_or(Status::BackendError),
        message: if status.is_none() {
            format!("unknown status {raw}: {message}")
        } else {
            message
        },
    })
}

pub fn quantize(plugin: &LoadedPlugin, desc: &QuantizeDesc) -> Result<(), PluginCallError> {
    // SAFETY: the descriptor's views point at live host buffers sized by the validator;
    // the output buffers are fresh and exclusively ours for the call's duration.
    call(plugin, |err| unsafe { (plugin.api().quantize)(desc, err) })
}

pub fn dequantize(plugin: &LoadedPlugin, desc: &DequantizeDesc) -> Result<(), PluginCallError> {
    // SAFETY: as for `quantize`.
    call(plugin, |err| unsafe {
        (plugin.api().dequantize)(desc, err)
    })
}

pub fn grouped_gemm(plugin: &LoadedPlugin, desc: &GroupedGemmDesc) -> Result<(), PluginCallError> {
    // SAFETY: as for `quantize`; offs points at a host slice that outlives the call.
    call(plugin, |err| unsafe {
        (plugin.api().grouped_gemm)(desc, err)
    })
}
