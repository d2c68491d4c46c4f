//! The CUDA device layer (feature `cuda`): one device per process, its primary context,
//! one host stream, and device buffers freed on drop.
//!
//! cudarc loads `libcuda` at run time (`dynamic-loading`), so a build needs no CUDA and
//! a machine without it falls back cleanly: [`probe`] checks that the library can be
//! loaded *before* any driver call (cudarc panics on a missing library).
//!
//! All host work (uploads, downloads, memsets, allocations) goes on one non-blocking
//! stream, which is also the stream plugins launch on (`GroupedGemmDesc::stream`), so
//! everything is ordered without events. Allocation and free are stream-ordered
//! (`cuMemAllocAsync` / `cuMemFreeAsync`): dropping a tensor while a kernel still reads
//! it is safe. Reading back synchronizes the stream.
//!
//! Plugins share the context: they retain the primary context of the device named by
//! `TensorView::device_ordinal`, which is the context this layer allocates in.

use cudarc::driver::result as cr;
use cudarc::driver::sys as cu;
use std::ffi::c_void;
use std::sync::OnceLock;

/// The CUDA device this process uses.
pub struct CudaDevice {
    pub ordinal: i32,
    pub name: String,
    pub total_mem: usize,
    pub compute_capability: (i32, i32),
    pub sms: i32,
    pub driver_version: i32,
    ctx: cu::CUcontext,
    stream: cu::CUstream,
}

// SAFETY: the context and stream handles are process-wide driver objects, valid for the
// life of the process (never destroyed); the driver API is thread-safe once the context
// is current on the calling thread, which every method ensures.
unsafe impl Send for CudaDevice {}
unsafe impl Sync for CudaDevice {}

fn err(what: &str) -> impl Fn(cr::DriverError) -> String + '_ {
    move |e| format!("{what} failed: {e}")
}

/// The device ordinal to use: `MXHOST_CUDA_DEVICE`, default 0. A value that is not a
/// number is an error rather than device 0: a user who names a device must get that one.
fn wanted_ordinal(var: Option<&str>) -> Result<i32, String> {
    match var.map(str::trim) {
        None | Some("") => Ok(0),
        Some(v) => v
            .parse()
            .map_err(|_| format!("MXHOST_CUDA_DEVICE={v:?} is not a device ordinal (0, 1, ...)")),
    }
}

fn open() -> Result<&'static CudaDevice, String> {
    // SAFETY: only tries to dlopen the library candidates.
    if !unsafe { cu::is_culib_present() } {
        return Err("the CUDA driver library (libcuda.so) was not found".into());
    }
    cr::init().map_err(err("cuInit"))?;
    let count = cr::device::get_count().map_err(err("cuDeviceGetCount"))?;
    if count == 0 {
        return Err("the CUDA driver found no device".into());
    }
    let ordinal = wanted_ordinal(std::env::var("MXHOST_CUDA_DEVICE").ok().as_deref())?;
    if ordinal < 0 || ordinal >= count {
        return Err(format!(
            "MXHOST_CUDA_DEVICE={ordinal} but there are {count} device(s)"
        ));
    }
    let dev = cr::device::get(ordinal).map_err(err("cuDeviceGet"))?;
    let name = cr::device::get_name(dev).map_err(err("cuDeviceGetName"))?;
    // SAFETY: `dev` came from cuDeviceGet.
    let total_mem = unsafe { cr::device::total_mem(dev) }.map_err(err("cuDeviceTotalMem"))?;
    let attr = |a| unsafe { cr::device::get_attribute(dev, a) };
    use cu::CUdevice_attribute::*;
    let major =
        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(err("cuDeviceGetAttribute"))?;
    let minor =
        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(err("cuDeviceGetAttribute"))?;
    let sms =
        attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(err("cuDeviceGetAttribute"))?;
    // SAFETY: as above; the primary context is retained for the life of the process.
    let ctx = unsafe { cr::primary_ctx::retain(dev) }.map_err(err("cuDevicePrimaryCtxRetain"))?;
    unsafe { cr::ctx::set_current(ctx) }.map_err(err("cuCtxSetCurrent"))?;
    let stream =
        cr::stream::create(cr::stream::StreamKind::NonBlocking).map_err(err("cuStreamCreate"))?;
    keep_freed_memory_in_pool(dev);
    let mut driver_version = 0;
    // SAFETY: plain out-parameter.
    unsafe { cu::cuDriverGetVersion(&mut driver_version) };
    Ok(Box::leak(Box::new(CudaDevice {
        ordinal,
        name,
        total_mem,
        compute_capability: (major, minor),
        sms,
        driver_version,
        ctx,
        stream,
    })))
}

/// Make the device's default memory pool (the one `cuMemAllocAsync` draws from, for
/// the host and for plugins) keep freed memory instead of returning it to the driver at
/// every synchronization. With the default release threshold (0) each training step's
/// first allocations map fresh physical memory again (the suspected reason the bench's
/// `quantize` row ran at half the kernel's bandwidth, docs/perf.md). Memory stays in the process's pool;
/// other processes see it as used. Best effort: a failure only costs speed.
fn keep_freed_memory_in_pool(dev: cu::CUdevice) {
    let mut pool: cu::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `dev` came from cuDeviceGet; `pool` is an out-parameter; the attribute
    // value is a u64 read by the call.
    unsafe {
        if cu::cuDeviceGetDefaultMemPool(&mut pool, dev) == cu::CUresult::CUDA_SUCCESS {
            let mut threshold: u64 = u64::MAX;
            let _ = cu::cuMemPoolSetAttribute(
                pool,
                cu::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut c_void,
            );
        }
    }
}

/// The process's CUDA device, opened on first use; `Err` says why CUDA is unusable.
pub fn probe() -> Result<&'static CudaDevice, String> {
    static DEV: OnceLock<Result<&'static CudaDevice, String>> = OnceLock::new();
    DEV.get_or_init(open).clone()
}

/// Like [`probe`], as an op error.
pub fn device() -> crate::error::OpResult<&'static CudaDevice> {
    probe().map_err(|why| {
        crate::error::OpError::new(
            crate::error::ErrorKind::BackendFailure,
            format!("CUDA is not available: {why}"),
        )
    })
}

fn op_err(what: &str) -> impl Fn(cr::DriverError) -> crate::error::OpError + '_ {
    move |e| {
        crate::error::OpError::new(
            crate::error::ErrorKind::BackendFailure,
            format!("CUDA {what} failed: {e}"),
        )
    }
}

impl CudaDevice {
    /// Make this device's context current on the calling thread.
    pub fn make_current(&self) -> crate::error::OpResult<()> {
        // SAFETY: the retained primary context lives for the process.
        unsafe { cr::ctx::set_current(self.ctx) }.map_err(op_err("cuCtxSetCurrent"))
    }

    /// The host stream, as the ABI's raw `CUstream`.
    pub fn stream_ptr(&self) -> *mut c_void {
        self.stream as *mut c_void
    }

    /// Wait for all work on the host stream; reports an asynchronous kernel fault.
    pub fn synchronize(&self) -> crate::error::OpResult<()> {
        self.make_current()?;
        // SAFETY: our stream, never destroyed.
        unsafe { cr::stream::synchronize(self.stream) }.map_err(op_err("stream synchronize"))
    }

    /// GPU time, in seconds, of the work `f` enqueues on the host stream, after `flush`
    /// bytes of scratch are overwritten first (evicting the L2 cache, as Triton's
    /// `do_bench` does before every timed call): events recorded around `f` only, so the
    /// flush is not timed; synchronizes the stream.
    pub fn time_on_stream(
        &'static self,
        flush: Option<&DeviceBuffer>,
        f: impl FnOnce() -> crate::error::OpResult<()>,
    ) -> crate::error::OpResult<f64> {
        let mut f = Some(f);
        let times = self.time_queued_on_stream(flush, 1, || f.take().map_or(Ok(()), |f| f()))?;
        Ok(times[0])
    }

    /// GPU times, in seconds, of `reps` runs of `f` enqueued one after another without waiting
    /// in between, each after `flush` bytes of scratch are overwritten and timed by its own
    /// pair of events; one synchronization at the end. That is Triton's `do_bench` loop (which
    /// bench_peers.py times torch with): the host runs ahead of the GPU, so no rep's first
    /// launch waits for the host. [`CudaDevice::time_on_stream`] synchronizes after every rep
    /// instead.
    pub fn time_queued_on_stream(
        &'static self,
        flush: Option<&DeviceBuffer>,
        reps: usize,
        mut f: impl FnMut() -> crate::error::OpResult<()>,
    ) -> crate::error::OpResult<Vec<f64>> {
        self.make_current()?;
        let mut marks = Vec::with_capacity(reps);
        for _ in 0..reps {
            let (start, end) = (Event::new()?, Event::new()?);
            if let Some(b) = flush.filter(|b| b.len > 0) {
                // SAFETY: `b.ptr` addresses `b.len` bytes on our stream.
                unsafe { cr::memset_d8_async(b.ptr, 0, b.len, self.stream) }
                    .map_err(op_err("cuMemsetD8Async"))?;
            }
            start.record(self.stream)?;
            f()?;
            end.record(self.stream)?;
            marks.push((start, end));
        }
        self.synchronize()?;
        marks
            .iter()
            .map(|(start, end)| {
                // SAFETY: both events were recorded on our stream, which is now synchronized.
                unsafe { cr::event::elapsed(start.0, end.0) }
                    .map(|ms| ms as f64 / 1e3)
                    .map_err(op_err("cuEventElapsedTime"))
            })
            .collect()
    }

    /// A point in the host stream's work: an event recorded there now, with the host's
    /// clock beside it (`mxhost bench`'s step trace: where a step's GPU time goes, and
    /// whether the host enqueues it faster than the GPU runs it).
    pub fn mark(&'static self) -> crate::error::OpResult<StreamMark> {
        self.make_current()?;
        let event = Event::new()?;
        event.record(self.stream)?;
        Ok(StreamMark {
            event,
            host: std::time::Instant::now(),
        })
    }

    /// A zero-filled device buffer of `len` bytes.
    pub fn zeros(&'static self, len: usize) -> crate::error::OpResult<DeviceBuffer> {
        self.filled(len, 0)
    }

    /// A device buffer of `len` bytes, each set to `byte`.
    pub fn filled(&'static self, len: usize, byte: u8) -> crate::error::OpResult<DeviceBuffer> {
        let b = self.alloc(len)?;
        if len > 0 {
            // SAFETY: `b.ptr` addresses `len` bytes on our stream.
            unsafe { cr::memset_d8_async(b.ptr, byte, len, self.stream) }
                .map_err(op_err("cuMemsetD8Async"))?;
        }
        Ok(b)
    }

    /// A device buffer holding a copy of `bytes`.
    pub fn upload(&'static self, bytes: &[u8]) -> crate::error::OpResult<DeviceBuffer> {
        let b = self.alloc(bytes.len())?;
        if !bytes.is_empty() {
            // SAFETY: `b.ptr` addresses `bytes.len()` bytes, freed stream-ordered after the
            // copy; small copies go through the plugins' pinned ring where
            // `MXHOST_PINNED_UPLOADS=1` (a pageable one may wait for the stream first), and
            // either way `bytes` may be dropped afterwards.
            unsafe { mxhost_plugin_common::staging::upload(self.stream, b.ptr, bytes) }
                .map_err(op_err("cuMemcpyHtoDAsync"))?;
        }
        Ok(b)
    }

    /// Uninitialised device memory (stream-ordered). Zero bytes give a null buffer.
    pub fn alloc(&'static self, len: usize) -> crate::error::OpResult<DeviceBuffer> {
        self.make_current()?;
        let ptr = if len == 0 {
            0
        } else {
            // SAFETY: stream-ordered allocation on our stream.
            unsafe { cr::malloc_async(self.stream, len) }.map_err(|e| {
                crate::error::OpError::new(
                    crate::error::ErrorKind::BackendFailure,
                    format!("CUDA allocation of {len} bytes failed: {e}"),
                )
            })?
        };
        Ok(DeviceBuffer {
            ptr,
            len,
            dev: self,
        })
    }
}

/// Bytes in device memory, freed (stream-ordered) on drop.
pub struct DeviceBuffer {
    ptr: u64,
    len: usize,
    dev: &'static CudaDevice,
}

impl DeviceBuffer {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }
    pub fn ordinal(&self) -> i32 {
        self.dev.ordinal
    }
    /// Copy the buffer to host memory (synchronizes the host stream first, so every
    /// kernel writing it has finished).
    pub fn download(&self) -> crate::error::OpResult<Vec<u8>> {
        let mut out = vec![0u8; self.len];
        if self.len > 0 {
            self.dev.make_current()?;
            // SAFETY: `ptr` addresses `len` bytes; we synchronize before returning.
            unsafe { cr::memcpy_dtoh_async(&mut out[..], self.ptr, self.dev.stream) }
                .map_err(op_err("cuMemcpyDtoHAsync"))?;
        }
        self.dev.synchronize()?;
        Ok(out)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 && self.dev.make_current().is_ok() {
            // SAFETY: allocated by `alloc` on this stream; freed after all work enqueued
            // on it, which is the only stream that uses it.
            unsafe {
                let _ = cr::free_async(self.ptr, self.dev.stream);
            }
        }
    }
}

/// An event on the host stream and the host time it was recorded at ([`CudaDevice::mark`]).
pub struct StreamMark {
    event: Event,
    host: std::time::Instant,
}

impl StreamMark {
    /// Seconds from `earlier` to `self` on the GPU (waits for `self` to complete) and on
    /// the host.
    pub fn since(&self, earlier: &StreamMark) -> crate::error::OpResult<(f64, f64)> {
        // SAFETY: both events are live and were recorded; synchronizing on the later one
        // completes both (one stream), as cuEventElapsedTime requires.
        let ms = unsafe {
            cr::event::synchronize(self.event.0).map_err(op_err("cuEventSynchronize"))?;
            cr::event::elapsed(earlier.event.0, self.event.0)
        }
        .map_err(op_err("cuEventElapsedTime"))?;
        let host = self.host.saturating_duration_since(earlier.host);
        Ok((ms as f64 / 1e3, host.as_secs_f64()))
    }
}

/// A CUDA event that is destroyed when dropped, so that every exit path of
/// [`CudaDevice::time_on_stream`] releases it.
struct Event(cu::CUevent);

impl Event {
    fn new() -> crate::error::OpResult<Event> {
        cr::event::create(cu::CUevent_flags::CU_EVENT_DEFAULT)
            .map(Event)
            .map_err(op_err("cuEventCreate"))
    }

    fn record(&self, stream: cu::CUstream) -> crate::error::OpResult<()> {
        // SAFETY: the event is live (owned by `self`) and `stream` is a live stream of the
        // current context.
        unsafe { cr::event::record(self.0, stream) }.map_err(op_err("cuEventRecord"))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event is ours; the driver defers destruction of an event that is
        // still pending until its work completes.
        unsafe { cr::event::destroy(self.0) }.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::wanted_ordinal;

    #[test]
    fn device_ordinal_defaults_to_zero_and_refuses_non_numbers() {
        assert_eq!(wanted_ordinal(None), Ok(0));
        assert_eq!(wanted_ordinal(Some(" ")), Ok(0));
        assert_eq!(wanted_ordinal(Some("3")), Ok(3));
        let e = wanted_ordinal(Some("gpu1")).unwrap_err();
        assert!(e.contains("MXHOST_CUDA_DEVICE=\"gpu1\""), "{e}");
    }
}
