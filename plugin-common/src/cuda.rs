//! The CUDA pieces both native plugins need, so that they cannot drift apart: library
//! probes (cudarc panics on a missing library, so every first call is probed), the
//! device's primary context (the one the host allocated the tensors in: retained once
//! per process, never released) and cuBLAS handles bound to a stream.

use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cudarc::cublas::sys as cb;
use cudarc::driver::result as cr;
use cudarc::driver::sys as cu;

/// Maps a driver error to a backend error naming the call.
pub fn drv(what: &str) -> impl Fn(cr::DriverError) -> PluginError + '_ {
    move |e| PluginError::backend(format!("CUDA {what} failed: {e}"))
}

/// Whether the CUDA driver library (libcuda) can be loaded.
pub fn driver_present() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library candidates.
    *P.get_or_init(|| unsafe { cu::is_culib_present() })
}

/// Whether cuBLAS can be loaded (cudarc tries `libcublas.so`, then `libcublas.so.13`,
/// `.12`, ...; loading it also loads its dependency `libcublasLt.so.<major>`).
pub fn cublas_present() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library candidates.
    *P.get_or_init(|| unsafe { cb::is_culib_present() })
}

/// Whether NVRTC (`libnvrtc.so.13`, ...) can be loaded.
pub fn nvrtc_present() -> bool {
    static P: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the library candidates.
    *P.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

/// A device's primary context, retained and never released (so always valid).
#[derive(Clone, Copy, Debug)]
pub struct RetainedContext(cu::CUcontext);
// SAFETY: a context handle is process-wide and usable from any thread once made current.
unsafe impl Send for RetainedContext {}
unsafe impl Sync for RetainedContext {}

impl RetainedContext {
    /// Makes the context current on this thread.
    pub fn make_current(self) -> PluginResult<()> {
        // SAFETY: a retained primary context stays valid for the life of the process.
        unsafe { cr::ctx::set_current(self.0) }.map_err(drv("cuCtxSetCurrent"))
    }
}

/// A device's retained primary context and the attributes the plugins choose by.
#[derive(Clone, Copy, Debug)]
pub struct PrimaryContext {
    pub ctx: RetainedContext,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// Streaming multiprocessors (at least 1).
    pub sms: u32,
    /// Opt-in shared memory per block, bytes.
    pub smem_optin: i32,
}

/// Retains device `ordinal`'s primary context (the host's: it allocated the tensors in
/// it), makes it current on this thread and reads its attributes. Call only after
/// [`driver_present`]. The context is never released: plugins cache the result per
/// ordinal for the life of the process and call [`RetainedContext::make_current`] on
/// later uses.
pub fn retain_primary_context(ordinal: i32) -> PluginResult<PrimaryContext> {
    cr::init().map_err(drv("cuInit"))?;
    let dev = cr::device::get(ordinal).map_err(drv("cuDeviceGet"))?;
    // SAFETY: `dev` came from cuDeviceGet; the retained context is never released.
    let ctx = RetainedContext(
        unsafe { cr::primary_ctx::retain(dev) }.map_err(drv("cuDevicePrimaryCtxRetain"))?,
    );
    ctx.make_current()?;
    // SAFETY: valid device handle; plain attribute queries.
    let attr =
        |a| unsafe { cr::device::get_attribute(dev, a) }.map_err(drv("cuDeviceGetAttribute"));
    use cu::CUdevice_attribute::*;
    Ok(PrimaryContext {
        ctx,
        cc: (
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        sms: attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as u32,
        smem_optin: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
    })
}

/// `Ok` for `CUBLAS_STATUS_SUCCESS`, else a backend error naming the call.
pub fn cublas_check(what: &str, st: cb::cublasStatus_t) -> PluginResult<()> {
    if st == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    Err(PluginError::backend(format!(
        "cuBLAS {what} failed: {st:?}"
    )))
}

/// A cuBLAS handle, used only under the handle map's mutex.
struct Handle(cb::cublasHandle_t);
// SAFETY: a cuBLAS handle may be used from any thread, one at a time (the mutex).
unsafe impl Send for Handle {}

/// The current CUDA context as a map key (0 when none is current): libraries' handles
/// belong to one context.
pub fn current_context() -> usize {
    let mut ctx: cu::CUcontext = std::ptr::null_mut();
    // SAFETY: out-parameter.
    unsafe { cu::cuCtxGetCurrent(&mut ctx) };
    ctx as usize
}

/// Runs `f` with the cuBLAS handle bound to `stream` in the current context, under a
/// process-wide lock (a handle is used by one thread at a time). Handles are created on
/// first use (stream bound, FP32-only reductions: `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`)
/// and kept for the process, one per (context, stream). Call only after
/// [`cublas_present`], with the device's context current.
pub fn with_cublas_handle<T>(
    stream: cu::CUstream,
    f: impl FnOnce(cb::cublasHandle_t) -> PluginResult<T>,
) -> PluginResult<T> {
    static HANDLES: OnceLock<Mutex<HashMap<(usize, usize), Handle>>> = OnceLock::new();
    let ctx = current_context();
    let mut map = HANDLES
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let h = match map.entry((ctx, stream as usize)) {
        Entry::Occupied(o) => o.get().0,
        Entry::Vacant(v) => v.insert(create_handle(stream)?).0,
    };
    f(h)
}

fn create_handle(stream: cu::CUstream) -> PluginResult<Handle> {
    let mut h: cb::cublasHandle_t = std::ptr::null_mut();
    // SAFETY: out-parameter; the caller made the device's context current.
    cublas_check("cublasCreate", unsafe { cb::cublasCreate_v2(&mut h) })?;
    // SAFETY (both calls): a live handle; the host's stream (or null).
    let bound = cublas_check("cublasSetStream", unsafe {
        cb::cublasSetStream_v2(h, stream as cb::cudaStream_t)
    })
    .and_then(|()| {
        cublas_check("cublasSetMathMode", unsafe {
            cb::cublasSetMathMode(
                h,
                cb::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
            )
        })
    });
    match bound {
        Ok(()) => Ok(Handle(h)),
        Err(e) => {
            // SAFETY: created above, stored nowhere.
            unsafe { cb::cublasDestroy_v2(h) };
            Err(e)
        }
    }
}

/// Device memory one plugin call allocates on the host's stream (`cuMemAllocAsync`),
/// freed stream-ordered when dropped, i.e. after the work enqueued with it: a call never
/// synchronizes for its scratch.
pub struct StreamScratch {
    stream: cu::CUstream,
    bufs: Vec<u64>,
}

impl StreamScratch {
    pub fn new(stream: cu::CUstream) -> Self {
        StreamScratch {
            stream,
            bufs: Vec::new(),
        }
    }

    /// `bytes` (at least 16) of device memory; `what` names the buffer in errors.
    pub fn alloc(&mut self, bytes: usize, what: &str) -> PluginResult<u64> {
        // SAFETY: stream-ordered allocation on the host's stream (valid or null).
        let p = unsafe { cr::malloc_async(self.stream, bytes.max(16)) }.map_err(|e| {
            PluginError::backend(format!("CUDA cuMemAllocAsync ({what}) failed: {e}"))
        })?;
        self.bufs.push(p);
        Ok(p)
    }
}

impl Drop for StreamScratch {
    fn drop(&mut self) {
        for &p in &self.bufs {
            // SAFETY: allocated on this stream by `alloc`; freed after the enqueued work.
            unsafe {
                let _ = cr::free_async(p, self.stream);
            }
        }
    }
}
