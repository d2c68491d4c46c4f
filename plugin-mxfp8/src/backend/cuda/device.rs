//! The device side of a call: one [`Dev`] per device ordinal (its primary context, the
//! architecture the kernels are built for, the loaded kernels and their shared-memory
//! limits) and [`Call`], a call's launch context (device, stream, stream-ordered scratch)
//! with the generic launch helpers.

use super::kernel_trace;
use super::GRID_YZ_MAX;
use crate::kernels::{self, Unit};
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::cuda::{
    driver_present, drv, retain_primary_context, RetainedContext, StreamScratch,
};
use mxhost_plugin_common::staging;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::result as cr;
use cudarc::driver::sys as cu;

pub(super) struct Dev {
    ctx: RetainedContext,
    /// [`kernels::HOPPER_ARCH`], or the `compute_XY` of the portable build.
    pub(super) arch: String,
    /// The portable build: no wgmma/TMA kernels; GEMMs through cuBLAS.
    pub(super) portable: bool,
    pub(super) sms: u32,
    pub(super) driver: i32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN` (bytes).
    smem_optin: i32,
    funcs: Mutex<HashMap<String, FuncHandle>>,
    loaded: Mutex<Vec<Unit>>,
}

/// A loaded kernel and whether it can be launched with the dynamic shared memory our
/// launches use (false only for a `mx_tgemm_*` kernel on a device that cannot give it).
#[derive(Clone, Copy)]
struct FuncHandle(cu::CUfunction, bool);
// SAFETY: CUDA driver handles are process-wide and usable from any thread once the
// context is current; modules are never unloaded.
unsafe impl Send for FuncHandle {}
unsafe impl Send for Dev {}
unsafe impl Sync for Dev {}

fn devices() -> &'static Mutex<HashMap<i32, &'static Dev>> {
    static D: OnceLock<Mutex<HashMap<i32, &'static Dev>>> = OnceLock::new();
    D.get_or_init(|| Mutex::new(HashMap::new()))
}

fn device(ordinal: i32) -> PluginResult<&'static Dev> {
    if !driver_present() {
        return Err(PluginError::unsupported(
            "CUDA backend: the CUDA driver library (libcuda) is not available on this machine",
        ));
    }
    let mut map = devices().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = map.get(&ordinal) {
        d.ctx.make_current()?;
        return Ok(d);
    }
    let pc = retain_primary_context(ordinal)?;
    let forced = std::env::var("MXHOST_MX_PORTABLE").ok();
    let arch = kernels::select_arch(pc.cc, forced.as_deref(), kernels::nvrtc_supported_archs)
        .map_err(|e| PluginError::unsupported(format!("CUDA backend, device {ordinal}: {e}")))?;
    let mut driver = 0;
    // SAFETY: plain out-parameter.
    unsafe { cu::cuDriverGetVersion(&mut driver) };
    let d: &'static Dev = Box::leak(Box::new(Dev {
        ctx: pc.ctx,
        portable: kernels::is_portable(&arch),
        arch,
        sms: pc.sms,
        driver,
        smem_optin: pc.smem_optin,
        funcs: Mutex::new(HashMap::new()),
        loaded: Mutex::new(Vec::new()),
    }));
    map.insert(ordinal, d);
    Ok(d)
}

impl Dev {
    /// The kernel `name` of `unit`, compiling and loading the unit on first use.
    fn func(&self, unit: Unit, name: &str) -> PluginResult<cu::CUfunction> {
        self.func_opt(unit, name)?.ok_or_else(|| {
            PluginError::backend(format!(
                "CUDA backend: device cannot give kernel {name} its dynamic shared memory"
            ))
        })
    }

    /// Like [`Dev::func`], but `None` for a `mx_tgemm_*` kernel whose shared memory
    /// (dynamic + static) exceeds what the device allows per block.
    pub(super) fn func_opt(&self, unit: Unit, name: &str) -> PluginResult<Option<cu::CUfunction>> {
        let mut funcs = self.funcs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = funcs.get(name) {
            return Ok(f.1.then_some(f.0));
        }
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.contains(&unit) {
            return Err(PluginError::backend(format!(
                "kernel {name} is not in module {}",
                unit.label()
            )));
        }
        if self.portable && !Unit::PORTABLE.contains(&unit) {
            return Err(PluginError::backend(format!(
                "CUDA backend: {} is not part of the portable build ({})",
                unit.label(),
                self.arch
            )));
        }
        let (cubin, _cached) = kernels::cubin(unit, &self.arch, self.driver)
            .map_err(|log| PluginError::backend(format!("CUDA backend: {log}")))?;
        let mut module: cu::CUmodule = std::ptr::null_mut();
        // SAFETY: `cubin` is a complete cubin image or NUL-terminated PTX; the module is
        // never unloaded.
        unsafe { cu::cuModuleLoadData(&mut module, cubin.as_ptr() as *const c_void) }
            .result()
            .map_err(drv("cuModuleLoadData"))?;
        let names = unit.kernel_names_for(&self.arch);
        for n in names {
            let c = CString::new(n.clone()).unwrap();
            let mut f: cu::CUfunction = std::ptr::null_mut();
            // SAFETY: valid module and NUL-terminated name.
            unsafe { cu::cuModuleGetFunction(&mut f, module, c.as_ptr()) }
                .result()
                .map_err(drv("cuModuleGetFunction"))?;
            let mut usable = true;
            if let Unit::Gemm { w2d, .. } = unit {
                let smem = gemm_smem(w2d);
                // SAFETY: valid function handle.
                unsafe {
                    cu::cuFuncSetAttribute(
                        f,
                        cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        smem as i32,
                    )
                }
                .result()
                .map_err(drv("cuFuncSetAttribute(max dynamic shared memory)"))?;
            }
            // 212992 / 216064 / 222208 B (mx_tgemm_*) or 228944 / 229200 B (mx_cgemm_*)
            // dynamic + a few KB static: fits Hopper's 227 KB opt-in; a device that cannot
            // give it leaves the kernel unusable (→ mx_gemm_*, or no chained GEMM).
            let big_smem = match unit {
                Unit::TGemm { w2d, .. } => Some(tgemm_smem(w2d, unit.tma_store())),
                Unit::Chain if n.starts_with("mx_cgemm") => Some(chain_smem(&n)),
                _ => None,
            };
            if let Some(smem) = big_smem {
                let smem = smem as i32;
                let mut stat: i32 = 0;
                // SAFETY: valid function handle, plain out-parameter.
                unsafe {
                    cu::cuFuncGetAttribute(
                        &mut stat,
                        cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                        f,
                    )
                }
                .result()
                .map_err(drv("cuFuncGetAttribute(static shared memory)"))?;
                usable = smem + stat <= self.smem_optin
                    // SAFETY: valid function handle.
                    && unsafe {
                        cu::cuFuncSetAttribute(
                            f,
                            cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            smem,
                        )
                    }
                    .result()
                    .is_ok();
            }
            funcs.insert(n, FuncHandle(f, usable));
        }
        loaded.push(unit);
        funcs.get(name).map(|f| f.1.then_some(f.0)).ok_or_else(|| {
            PluginError::backend(format!("kernel {name} is not in module {}", unit.label()))
        })
    }
}

/// Dynamic shared memory of our GEMM instantiations (NC = 2, 5 stages).
pub(super) fn gemm_smem(w2d: bool) -> u32 {
    kernels::GEMM_STAGES * if w2d { 39040 } else { 40960 }
}

/// Dynamic shared memory of our TMA GEMM instantiations: 6 stages of 35840 (w2d) /
/// 36864 (w1d) bytes + 1024 B slack for the 1024-byte alignment of SWIZZLE_128B tiles
/// (216064 / 222208 B, README); the TMA-store kernels (`tma_store`, w2d only) 5 stages
/// + 2 × 16 KB of output staging (212992 B, `mxt_v2t_smem_bytes`).
pub(super) fn tgemm_smem(w2d: bool, tma_store: bool) -> u32 {
    if tma_store {
        return kernels::TGEMM_STORE_STAGES * 35840 + 2 * 16384 + 1024;
    }
    kernels::TGEMM_STAGES * if w2d { 35840 } else { 36864 } + 1024
}

/// Dynamic shared memory of the chained GEMM `mx_cgemm_*` (`mxc_smem_bytes<STAGES, true,
/// TCB>()` of mx_tgemm_chain.cuh, pinned by static_asserts in mx_chain_gemm.cu): 4 stages with
/// rounds of 15 units, or the `_s3` builds' 3 stages with 82 and the tensor-core correction
/// slabs (run 111).
pub(super) fn chain_smem(name: &str) -> u32 {
    if name.contains("_s3") {
        228736
    } else {
        228944
    }
}

/// One call's launch context: device, stream and stream-ordered scratch buffers.
pub(super) struct Call {
    pub(super) dev: &'static Dev,
    pub(super) stream: cu::CUstream,
    scratch: StreamScratch,
    /// This call's number in the process (`MXHOST_MX_KERNEL_TRACE` counts gaps within a call).
    id: u64,
    /// Under `MXHOST_MX_KERNEL_TRACE`, what the call is (its entry and exit marks' names).
    label: Option<String>,
}

impl Drop for Call {
    fn drop(&mut self) {
        if let Some(label) = self.label.take() {
            self.mark(&format!("(exit {label})"));
        }
    }
}

impl Call {
    fn new(ordinal: i32, stream: *mut c_void) -> PluginResult<Call> {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        Ok(Call {
            dev: device(ordinal)?,
            stream: stream as cu::CUstream,
            scratch: StreamScratch::new(stream as cu::CUstream),
            id: CALLS.fetch_add(1, Ordering::Relaxed),
            label: None,
        })
    }

    /// A plugin entry point's call (the only way one is made), named by `label` under
    /// `MXHOST_MX_KERNEL_TRACE`: the trace marks where the call begins and ends on the stream,
    /// so the idle time before its first kernel (the GPU waiting for the host) and after its
    /// last one read as gaps of their own (docs/perf.md run 199: W's call 65–75 µs longer in
    /// the step than its kernels).
    pub(super) fn entered(
        ordinal: i32,
        stream: *mut c_void,
        label: impl FnOnce() -> String,
    ) -> PluginResult<Call> {
        let mut call = Call::new(ordinal, stream)?;
        if kernel_trace::enabled() {
            let label = label();
            call.mark(&format!("(entry {label})"));
            call.label = Some(label);
        }
        Ok(call)
    }

    /// An empty, timed point in the stream under `MXHOST_MX_KERNEL_TRACE` (nothing otherwise).
    fn mark(&self, what: &str) {
        let _ = kernel_trace::traced(self.id, self.stream, what, || Ok(()));
    }

    pub(super) fn alloc(&mut self, bytes: usize) -> PluginResult<u64> {
        self.scratch.alloc(bytes, "workspace")
    }

    pub(super) fn zero(&self, p: u64, bytes: usize) -> PluginResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        kernel_trace::traced(self.id, self.stream, "(memset)", || {
            // SAFETY: `p` addresses at least `bytes` device bytes (host output or scratch).
            unsafe { cr::memset_d8_async(p, 0, bytes, self.stream) }.map_err(drv("cuMemsetD8Async"))
        })
    }

    /// Writes `value` to the 8 device bytes at `p`, in stream order.
    pub(super) fn put_u64(&self, p: u64, value: u64) -> PluginResult<()> {
        self.put_u64s(p, &[value])
    }

    /// Writes `values` to the `8 * values.len()` device bytes at `p`, in stream order.
    pub(super) fn put_u64s(&self, p: u64, values: &[u64]) -> PluginResult<()> {
        // SAFETY: `p` addresses that many writable device bytes (annex words).
        unsafe { self.upload(p, values) }
    }

    /// Copies `values` (plain numbers) to the device bytes at `dst` in stream order, through
    /// the pinned ring where `MXHOST_PINNED_UPLOADS=1` ([`staging::upload`]); `values` may be
    /// dropped when this returns.
    ///
    /// # Safety
    /// `dst` addresses `size_of_val(values)` writable device bytes that stay allocated until
    /// the copy has run (host tensors of the call, or this call's scratch).
    pub(super) unsafe fn upload<T: Copy>(&self, dst: u64, values: &[T]) -> PluginResult<()> {
        kernel_trace::traced(self.id, self.stream, "(upload)", || {
            // SAFETY: the caller's contract; the call's context is current (`Call::new`).
            unsafe { staging::upload_slice(self.stream, dst, values) }
                .map_err(drv("cuMemcpyHtoDAsync"))
        })
    }

    pub(super) fn launch(
        &self,
        unit: Unit,
        name: &str,
        grid: (usize, usize, usize),
        block: (u32, u32, u32),
        smem: u32,
        params: &mut [*mut c_void],
    ) -> PluginResult<()> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        if grid.0 > i32::MAX as usize || grid.1 > GRID_YZ_MAX || grid.2 > GRID_YZ_MAX {
            return Err(PluginError::unsupported(format!(
                "CUDA backend: {name} would need a grid of {grid:?} blocks (limit 2^31-1 × 65535 × 65535)"
            )));
        }
        let f = self.dev.func(unit, name)?;
        kernel_trace::traced(self.id, self.stream, name, || {
            // SAFETY: `params` point at live values laid out as the kernel's parameters; every
            // buffer they reference outlives the enqueued work (host tensors for the call,
            // scratch freed stream-ordered after it).
            unsafe {
                cr::launch_kernel(
                    f,
                    (grid.0 as u32, grid.1 as u32, grid.2 as u32),
                    block,
                    smem,
                    self.stream,
                    params,
                )
            }
            .map_err(|e| PluginError::backend(format!("CUDA launch of {name} failed: {e}")))
        })
    }
}
