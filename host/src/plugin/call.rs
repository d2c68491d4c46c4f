//! Calling through a plugin's function table: an error buffer for its message, the
//! status decoded, and a watchdog.
//!
//! Neither epochs nor fuel can interrupt native code, so a plugin call on the CPU runs on
//! a worker thread while the caller waits at most the watchdog limit
//! (`--plugin-timeout-s`). A call the watchdog gives up on keeps running detached; the
//! buffers it uses ([`KeepAlive`]) are owned by that thread until it returns, so the
//! plugin never touches freed memory while the guest gets an error and the host goes on.
//! GPU calls only enqueue work and return at once, so they are not run on a worker.

use super::loader::LoadedPlugin;
use mxhost_plugin_abi::{
    DequantizeDesc, ErrorBuf, FillBytesDesc, GroupedGemmDesc, QuantizeDesc, Status,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A plugin call that returned a non-OK status.
#[derive(Debug, Clone, thiserror::Error)]
#[error("plugin `{plugin}` failed ({status:?}): {message}")]
pub struct PluginCallError {
    pub plugin: String,
    pub status: Status,
    pub message: String,
}

const ERROR_CAPACITY: usize = 4096;

/// Watchdog limit in milliseconds; 0 = off (calls run on the caller's thread).
static WATCHDOG_MS: AtomicU64 = AtomicU64::new(0);

/// Set the watchdog for plugin calls on the CPU (`None` or zero turns it off).
pub fn set_watchdog(limit: Option<Duration>) {
    let ms = limit.map_or(0, |d| d.as_millis().clamp(1, u64::MAX as u128) as u64);
    WATCHDOG_MS.store(ms, Ordering::Relaxed);
}

fn watchdog() -> Option<Duration> {
    match WATCHDOG_MS.load(Ordering::Relaxed) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

/// Everything a plugin call reads or writes (tensor clones, owned offsets): held until
/// the call returns, even when the watchdog has stopped waiting for it.
pub struct KeepAlive(pub Vec<Box<dyn std::any::Any>>);

/// Moves raw-pointer descriptors and their buffers to the worker thread.
struct AssertSend<T>(T);
// SAFETY: the descriptor's pointers address buffers owned by the KeepAlive travelling
// with it (CPU memory, freed by whichever thread drops it); plugins must be callable
// from any thread (ABI contract).
unsafe impl<T> Send for AssertSend<T> {}

impl<T> AssertSend<T> {
    fn into_inner(self) -> T {
        self.0
    }
}

type Entry<D> = unsafe extern "C" fn(*const D, *mut ErrorBuf) -> u32;

/// An error buffer over `storage` for one plugin call (`storage` outlives the call).
fn error_buf(storage: &mut [u8]) -> ErrorBuf {
    ErrorBuf {
        struct_size: std::mem::size_of::<ErrorBuf>(),
        data: storage.as_mut_ptr(),
        capacity: storage.len(),
        len: 0,
    }
}

/// Call `entry(desc)` and decode the status and message. `on_cpu`: the plugin does the
/// work inside the call, so the watchdog applies.
fn call<D: Copy + 'static>(
    plugin: &str,
    entry: Entry<D>,
    desc: &D,
    keep: KeepAlive,
    on_cpu: bool,
) -> Result<(), PluginCallError> {
    let run = move |desc: D, keep: KeepAlive| {
        let mut storage = vec![0u8; ERROR_CAPACITY];
        let mut buf = error_buf(&mut storage);
        // SAFETY: the descriptor's views point at live buffers (held by `keep`) sized
        // by the validator; outputs are fresh and only the plugin writes them.
        let raw = unsafe { entry(&desc, &mut buf) };
        drop(keep);
        let len = buf.len.min(ERROR_CAPACITY);
        storage.truncate(len);
        (raw, storage)
    };
    let (raw, message) = match watchdog().filter(|_| on_cpu) {
        None => run(*desc, keep),
        Some(limit) => {
            let (tx, rx) = std::sync::mpsc::channel();
            let job = AssertSend((*desc, keep));
            std::thread::Builder::new()
                .name("mxhost-plugin-call".into())
                .spawn(move || {
                    let (desc, keep) = job.into_inner();
                    // The receiver is gone when the watchdog gave up: nothing to report.
                    let _ = tx.send(run(desc, keep));
                })
                .map_err(|e| PluginCallError {
                    plugin: plugin.to_string(),
                    status: Status::BackendError,
                    message: format!("cannot start the plugin-call thread: {e}"),
                })?;
            rx.recv_timeout(limit).map_err(|_| PluginCallError {
                plugin: plugin.to_string(),
                status: Status::BackendError,
                message: format!(
                    "the plugin call exceeded the watchdog limit of {:.1} s (--plugin-timeout-s); \
                     it keeps running detached and holds its buffers until it returns",
                    limit.as_secs_f64()
                ),
            })?
        }
    };
    decode(plugin, raw, &message)
}

fn decode(plugin: &str, raw: u32, message: &[u8]) -> Result<(), PluginCallError> {
    let status = Status::from_raw(raw);
    if status == Some(Status::Ok) {
        return Ok(());
    }
    let mut message = String::from_utf8_lossy(message).into_owned();
    if message.is_empty() {
        message = "no message".into();
    }
    Err(PluginCallError {
        plugin: plugin.to_string(),
        status: status.unwrap_or(Status::BackendError),
        message: if status.is_none() {
            format!("unknown status {raw}: {message}")
        } else {
            message
        },
    })
}

/// Ask `entry` (the plugin's ABI 1.3 `annex_words`) how large an annex it wants. A size
/// query only: no watchdog.
pub fn annex_words(
    plugin: &LoadedPlugin,
    entry: mxhost_plugin_abi::AnnexWordsFn,
    query: &mxhost_plugin_abi::AnnexQuery,
) -> Result<u64, PluginCallError> {
    let mut storage = vec![0u8; ERROR_CAPACITY];
    let mut buf = error_buf(&mut storage);
    let mut words = 0u64;
    // SAFETY: the query is a live local, `words` a writable u64, `buf` a live buffer.
    let raw = unsafe { entry(query, &mut words, &mut buf) };
    storage.truncate(buf.len.min(ERROR_CAPACITY));
    decode(&plugin.name, raw, &storage)?;
    Ok(words)
}

pub fn quantize(
    plugin: &LoadedPlugin,
    desc: &QuantizeDesc,
    keep: KeepAlive,
    on_cpu: bool,
) -> Result<(), PluginCallError> {
    call(&plugin.name, plugin.api().quantize, desc, keep, on_cpu)
}

pub fn dequantize(
    plugin: &LoadedPlugin,
    desc: &DequantizeDesc,
    keep: KeepAlive,
    on_cpu: bool,
) -> Result<(), PluginCallError> {
    call(&plugin.name, plugin.api().dequantize, desc, keep, on_cpu)
}

pub fn grouped_gemm(
    plugin: &LoadedPlugin,
    desc: &GroupedGemmDesc,
    keep: KeepAlive,
    on_cpu: bool,
) -> Result<(), PluginCallError> {
    call(&plugin.name, plugin.api().grouped_gemm, desc, keep, on_cpu)
}

/// ABI 1.7: `entry` (the `fill_bytes` of the plugin named `plugin`) writes the bytes of an MX
/// tensor its quantize call left out.
pub fn fill_bytes(
    plugin: &str,
    entry: Entry<FillBytesDesc>,
    desc: &FillBytesDesc,
    keep: KeepAlive,
    on_cpu: bool,
) -> Result<(), PluginCallError> {
    call(plugin, entry, desc, keep, on_cpu)
}
