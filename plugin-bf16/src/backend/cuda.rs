//! The CUDA backend: grouped GEMM on tensors in CUDA device memory through cuBLAS
//! (batched/grouped `cublasGemm*Ex`, bf16 operands, `CUBLAS_COMPUTE_32F`), the baseline
//! a user would otherwise pick. Same semantics as the CPU backend (the shared driver of
//! `mxhost_plugin_common::gemm`); results agree up to f32 summation order.
//!
//! - **Context and stream**: the primary context of the device named by the tensors'
//!   `device_ordinal` (the one the host allocated them in), retained once and made
//!   current on the calling thread. All work is enqueued on the host's stream
//!   (`desc.stream`, a raw `CUstream`; null = the legacy default stream): cuBLAS through
//!   `cublasSetStream`, memsets and the conversion kernel directly. Scratch memory is
//!   stream-ordered (`cuMemAllocAsync`/`cuMemFreeAsync` on that stream), so a call never
//!   synchronizes; the host synchronizes before it reads results back.
//! - **cuBLAS handles**: created lazily, one per (context, stream) pair and used under a
//!   mutex (a handle is not thread-safe), by `mxhost_plugin_common::cuda::with_cublas_handle`,
//!   which the mxfp8 plugin's wgrad path shares. One handle per stream keeps cuBLAS's default
//!   workspace from being shared between streams. Math mode
//!   `CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`: split-K
//!   partial sums stay in f32 even when the output is bf16 (FP32 accumulation
//!   throughout) — for the batched and grouped calls as for `cublasGemmEx`. Handles are
//!   never destroyed (plugins are never unloaded).
//! - **GEMMs**: row-major mapped onto cuBLAS's column-major convention as
//!   [`super::plan`] documents (and its tests check against the CPU driver). A/B
//!   `CUDA_R_16BF`, C `CUDA_R_32F` or `CUDA_R_16BF` per the output dtype (cuBLAS rounds
//!   the f32 accumulator to bf16 in its epilogue), alpha = 1, beta = 0,
//!   `CUBLAS_COMPUTE_32F`, `CUBLAS_GEMM_DEFAULT`. The per-expert calls are grouped into
//!   batches of one shape ([`plan::Plan::batches`]; equal-sized experts → one batch) and
//!   issued in as few calls as cuBLAS allows (default, `MXHOST_BF16_CUBLAS=auto`):
//!   1. one batch with offsets in arithmetic progression (equal-sized experts, no empty
//!      expert between them) → one `cublasGemmStridedBatchedEx`, nothing uploaded;
//!   2. otherwise, bf16 output → one `cublasGemmGroupedBatchedEx` (cuBLAS ≥ 12.5; one
//!      group per batch) — cuBLAS has no bf16 × bf16 → f32 combination for it, so f32
//!      outputs skip it;
//!   3. otherwise (f32 output, grouped call missing or refused) one call per batch:
//!      `cublasGemmStridedBatchedEx` when its offsets are a progression, else
//!      `cublasGemmBatchedEx`, and `cublasGemmEx` for a batch of one.
//!
//!   The pointer-array calls (2, 3) read the matrices' addresses from device memory:
//!   `3 · P` u64 in stream-ordered scratch, copied by `cuMemcpyHtoDAsync` from a host
//!   vector (pageable: staged by the driver before the call returns), freed after the
//!   GEMMs in stream order. cuBLAS cannot check the alignment of addresses it does not
//!   see, so those calls are used only when every address is 16-byte aligned. A call
//!   cuBLAS refuses (`NOT_SUPPORTED`, `ARCH_MISMATCH`: nothing enqueued), an entry
//!   point the loaded library does not export (looked up once, before any call; cudarc
//!   would panic) or unaligned addresses fall back to one `cublasGemmEx` per expert.
//!   `MXHOST_BF16_CUBLAS=grouped|batched|per-expert` forces a path for A/B runs
//!   (grouped even for equal experts; never grouped; the old per-expert loop).
//! - **Padding, empty experts, zero reductions**: `cuMemsetD8Async` of the planned
//!   output ranges (padding rows of forward/dgrad, empty experts' wgrad blocks, the
//!   whole output when the reduction length is 0).
//! - **f32 operands**: rounded to bf16 (RNE, bit-identical to the CPU backend's
//!   `half::bf16::from_f32`) into stream-ordered scratch by one small integer-only
//!   kernel ([`super::convert`]), compiled with NVRTC for the device's virtual
//!   architecture (`compute_XY`, PTX JIT-compiled by the driver) on first use and kept
//!   per device for the process. Only the rows a GEMM reads are converted. bf16
//!   operands are used in place. NVRTC (`libnvrtc`) is only needed when an operand is
//!   f32.
//! - **Libraries**: cudarc loads libcuda, libcublas (which pulls in libcublasLt) and
//!   libnvrtc at run time; each is probed with `is_culib_present()` before its first
//!   call, so a machine without them gets Unsupported naming the library, never a panic.
//! - **Unsupported**: MX operands (as on the CPU), any `m`/`n`/`k`/leading dimension
//!   above `i32::MAX` (cuBLAS's 32-bit arguments), and GPUs below compute capability 8.0
//!   (no bf16 GEMM).
//! - **Not used**: `offs_device` (shapes, strides and pointer arrays come from the host
//!   copy of the offsets, so no device-side offsets and no synchronization are needed).

use super::convert;
use super::plan::{self, Plan, Shape, Src};
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::DType;
use mxhost_plugin_common::args::{DequantizeArgs, GemmArgs, OperandArg, QuantizeArgs, TensorArg};
use mxhost_plugin_common::cuda::{
    cublas_check, drv, retain_primary_context, with_cublas_handle, RetainedContext, StreamScratch,
};
use mxhost_plugin_common::entry::Backend;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, OnceLock};

use cudarc::cublas::sys as cb;
use cudarc::driver::result as cr;
use cudarc::driver::sys as cu;

pub struct CudaBackend;

/// Message for MX operands (the CPU backend says the same through `Bf16Prep`).
const NO_MX: &str = "the bf16 plugin does not accept MX (pre-quantized) operands; pass dense f32/bf16 operands or select the mxfp8 plugin";

pub use mxhost_plugin_common::cuda::{cublas_present, driver_present, nvrtc_present};

const NO_CUBLAS: &str = "CUDA backend of the bf16 plugin: cuBLAS could not be loaded (looked for libcublas.so / libcublas.so.13 and its dependency libcublasLt.so.13 on the library path; add the CUDA 13 library directory, e.g. /usr/local/cuda/lib64, to LD_LIBRARY_PATH) — use --device cpu otherwise";

const NO_NVRTC: &str = "CUDA backend of the bf16 plugin: f32 operands are rounded to bf16 by a kernel compiled with NVRTC, but libnvrtc (libnvrtc.so.13) could not be loaded; add the CUDA 13 library directory to LD_LIBRARY_PATH or pass bf16 operands";

/// A loaded kernel (driver handles are process-wide; modules are never unloaded).
#[derive(Clone, Copy)]
struct Func(cu::CUfunction);
// SAFETY: a CUfunction is a process-wide driver handle, usable from any thread.
unsafe impl Send for Func {}
unsafe impl Sync for Func {}

struct Dev {
    ordinal: i32,
    ctx: RetainedContext,
    cc: (i32, i32),
    sms: u32,
    convert: OnceLock<Result<Func, String>>,
}
// SAFETY: the context is process-wide and usable from any thread once made current;
// the other fields are synchronized.
unsafe impl Send for Dev {}
unsafe impl Sync for Dev {}

fn device(ordinal: i32) -> PluginResult<&'static Dev> {
    static DEVICES: OnceLock<Mutex<HashMap<i32, &'static Dev>>> = OnceLock::new();
    if !driver_present() {
        return Err(PluginError::unsupported(
            "CUDA backend of the bf16 plugin: the CUDA driver library (libcuda) is not available on this machine",
        ));
    }
    let mut map = DEVICES
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(d) = map.get(&ordinal) {
        d.ctx.make_current()?;
        return Ok(d);
    }
    let pc = retain_primary_context(ordinal)?;
    let d: &'static Dev = Box::leak(Box::new(Dev {
        ordinal,
        ctx: pc.ctx,
        cc: pc.cc,
        sms: pc.sms,
        convert: OnceLock::new(),
    }));
    map.insert(ordinal, d);
    Ok(d)
}

impl Dev {
    /// The conversion kernel, compiled and loaded on first use.
    fn convert_fn(&self) -> PluginResult<cu::CUfunction> {
        if !nvrtc_present() {
            return Err(PluginError::unsupported(NO_NVRTC));
        }
        let r = self.convert.get_or_init(|| {
            let ptx = compile_convert(self.cc.0, self.cc.1)?;
            let image = CString::new(ptx).map_err(|e| e.to_string())?;
            // SAFETY: a NUL-terminated PTX image; the module is never unloaded. The
            // device's context is current (set by `device`).
            let module = unsafe { cr::module::load_data(image.as_ptr() as *const c_void) }
                .map_err(|e| format!("cuModuleLoadData (bf16 conversion PTX) failed: {e}"))?;
            // SAFETY: a module loaded above.
            let f =
                unsafe { cr::module::get_function(module, CString::new(convert::KERNEL).unwrap()) }
                    .map_err(|e| format!("cuModuleGetFunction({}) failed: {e}", convert::KERNEL))?;
            Ok(Func(f))
        });
        r.as_ref().map(|f| f.0).map_err(|e| {
            PluginError::backend(format!(
                "CUDA backend of the bf16 plugin (device {}): {e}",
                self.ordinal
            ))
        })
    }
}

/// Compile the conversion kernel with NVRTC for `compute_{major}{minor}`; the PTX text.
/// Probe [`nvrtc_present`] first (cudarc panics on a missing library).
pub fn compile_convert(major: i32, minor: i32) -> Result<String, String> {
    if !nvrtc_present() {
        return Err(NO_NVRTC.into());
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: convert::nvrtc_options(major, minor),
        name: Some("mxhost_bf16_convert.cu".into()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(convert::SOURCE, opts)
        .map(|ptx| ptx.to_src())
        .map_err(|e| format!("NVRTC failed to compile the bf16 conversion kernel for compute_{major}{minor}: {e}"))
}

/// One call's launch context: device, stream and stream-ordered scratch buffers.
struct Call {
    dev: &'static Dev,
    stream: cu::CUstream,
    scratch: StreamScratch,
}

impl Call {
    fn alloc(&mut self, bytes: usize) -> PluginResult<u64> {
        self.scratch.alloc(bytes, "bf16 operand scratch")
    }

    /// bf16 copy of the first `count` elements of the f32 tensor at `src`.
    fn convert_f32(&mut self, src: u64, count: usize) -> PluginResult<u64> {
        let f = self.dev.convert_fn()?;
        let dst = self.alloc(count * 2)?;
        let n = count as u64;
        let mut params = [
            &src as *const u64 as *mut c_void,
            &dst as *const u64 as *mut c_void,
            &n as *const u64 as *mut c_void,
        ];
        let grid = convert::grid(count).min(self.dev.sms * 32);
        // SAFETY: the kernel takes (const u32*, u16*, u64); `src` holds ≥ count f32
        // (device memory of the request), `dst` count bf16 (scratch freed after the work).
        unsafe {
            cr::launch_kernel(
                f,
                (grid, 1, 1),
                (convert::BLOCK, 1, 1),
                0,
                self.stream,
                &mut params,
            )
        }
        .map_err(drv("launch of the bf16 conversion kernel"))?;
        Ok(dst)
    }
}

fn dense(op: &OperandArg) -> PluginResult<&TensorArg> {
    match op {
        OperandArg::Dense(t) => Ok(t),
        OperandArg::Mx(_) => Err(PluginError::unsupported(NO_MX)),
    }
}

fn check_aligned(t: &TensorArg) -> PluginResult<()> {
    let align = t.dtype.size_bytes() as usize;
    if t.numel > 0 && !(t.ptr as usize).is_multiple_of(align) {
        return Err(PluginError::invalid(format!(
            "{}: device pointer is not aligned for {}",
            t.what,
            t.dtype.name()
        )));
    }
    Ok(())
}

fn i32_of(v: usize) -> i32 {
    v as i32 // callers check `Plan::max_dim() <= i32::MAX` first
}

impl Backend for CudaBackend {
    fn quantize(&self, _args: &QuantizeArgs) -> PluginResult<()> {
        Err(PluginError::unsupported(super::cpu::NO_QUANTIZE))
    }

    fn dequantize(&self, _args: &DequantizeArgs) -> PluginResult<()> {
        Err(PluginError::unsupported(super::cpu::NO_QUANTIZE))
    }

    fn grouped_gemm(&self, args: &GemmArgs) -> PluginResult<()> {
        let (a, b, out) = (dense(&args.a)?, dense(&args.b)?, &args.out);
        for t in [a, b, out] {
            check_aligned(t)?;
        }
        if out.numel == 0 {
            return Ok(());
        }
        let groups = args.groups();
        let plan = plan::plan(
            args.pass,
            args.weight_layout,
            args.rows,
            args.n,
            args.k,
            &groups,
        );
        if plan.max_dim() > i32::MAX as usize {
            return Err(PluginError::unsupported(format!(
                "CUDA backend of the bf16 plugin: a GEMM dimension of {} exceeds cublasGemmEx's 32-bit limit; use --device cpu for this shape",
                plan.max_dim()
            )));
        }
        let dev = device(args.ordinal)?;
        let (major, minor) = dev.cc;
        if major < 8 {
            return Err(PluginError::unsupported(format!(
                "CUDA backend of the bf16 plugin: bf16 GEMMs need compute capability 8.0 or newer; device {} is {major}.{minor}",
                dev.ordinal
            )));
        }
        if !cublas_present() {
            return Err(PluginError::unsupported(NO_CUBLAS));
        }
        let mut call = Call {
            dev,
            stream: args.stream as cu::CUstream,
            scratch: StreamScratch::new(args.stream as cu::CUstream),
        };
        run(&mut call, &plan, a, b, out)
    }
}

/// How the GEMMs of a request are issued (environment variable [`ISSUE_ENV`], read
/// once; for A/B measurements — the default is the fastest known choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Issue {
    /// `auto` (default): all calls one strided batch (equal-sized experts) → one
    /// `cublasGemmStridedBatchedEx`; otherwise one `cublasGemmGroupedBatchedEx` (bf16
    /// output), else one batched call per shape.
    Auto,
    /// `grouped`: `cublasGemmGroupedBatchedEx` wherever it applies, even for equal
    /// experts.
    Grouped,
    /// `batched`: one call per shape (strided, pointer-array or single), never grouped.
    Batched,
    /// `per-expert`: one `cublasGemmEx` per non-empty expert.
    PerExpert,
}

/// Environment variable selecting how GEMMs are issued: `auto` (default), `grouped`,
/// `batched` or `per-expert` (see the module doc).
pub const ISSUE_ENV: &str = "MXHOST_BF16_CUBLAS";

fn parse_issue(v: Option<&str>) -> Result<Issue, String> {
    match v.map(str::trim) {
        None | Some("") | Some("auto") => Ok(Issue::Auto),
        Some("grouped") => Ok(Issue::Grouped),
        Some("batched") => Ok(Issue::Batched),
        Some("per-expert") => Ok(Issue::PerExpert),
        Some(other) => Err(format!(
            "{ISSUE_ENV}={other:?}: expected auto, grouped, batched or per-expert"
        )),
    }
}

fn issue_mode() -> PluginResult<Issue> {
    static M: OnceLock<Result<Issue, String>> = OnceLock::new();
    M.get_or_init(|| parse_issue(std::env::var(ISSUE_ENV).ok().as_deref()))
        .clone()
        .map_err(PluginError::invalid)
}

/// Which batched entry points the loaded cuBLAS exports (cudarc panics on a missing
/// symbol, so each is looked up before its first call). `cublasGemmGroupedBatchedEx`
/// needs cuBLAS 12.5 or newer; the other two are much older.
struct Api {
    grouped: bool,
    batched: bool,
    strided: bool,
}

/// Probe once; call only after [`cublas_present`].
fn api() -> &'static Api {
    static A: OnceLock<Api> = OnceLock::new();
    A.get_or_init(|| {
        // SAFETY: cuBLAS is loadable (checked by the caller); symbols are only looked
        // up, not called, here.
        let lib = unsafe { cb::culib() };
        let has =
            |name: &str| unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok();
        Api {
            grouped: has("cublasGemmGroupedBatchedEx"),
            batched: has("cublasGemmBatchedEx"),
            strided: has("cublasGemmStridedBatchedEx"),
        }
    })
}

fn run(
    call: &mut Call,
    plan: &Plan,
    a: &TensorArg,
    b: &TensorArg,
    out: &TensorArg,
) -> PluginResult<()> {
    // Everything that can fail for lack of a library or a handle comes before the first
    // enqueued write, so such a failure leaves the output untouched.
    let mode = issue_mode()?;
    let needs_convert = !plan.gemms.is_empty() && [a, b].iter().any(|t| t.dtype == DType::F32);
    if needs_convert {
        call.dev.convert_fn()?;
    }
    let stream = call.stream;
    with_cublas_handle(stream, |h| issue(call, plan, a, b, out, mode, h))
}

/// Zero-fills and issues the plan's GEMMs with handle `h` (see [`run`]).
fn issue(
    call: &mut Call,
    plan: &Plan,
    a: &TensorArg,
    b: &TensorArg,
    out: &TensorArg,
    mode: Issue,
    h: cb::cublasHandle_t,
) -> PluginResult<()> {
    let esz = out.dtype.size_bytes() as usize;
    for z in &plan.zero {
        if z.is_empty() {
            continue;
        }
        // SAFETY: the range lies within the output (plan invariant, unit-tested), which
        // the host allocated with numel × size bytes on this device.
        unsafe {
            cr::memset_d8_async(
                out.ptr as u64 + (z.start * esz) as u64,
                0,
                z.len() * esz,
                call.stream,
            )
        }
        .map_err(drv("cuMemsetD8Async"))?;
    }
    if plan.gemms.is_empty() {
        return Ok(());
    }
    // Operands as bf16 device pointers: bf16 in place, f32 rounded into scratch (only
    // the leading elements the GEMMs read).
    let mut bf16_ptr = |t: &TensorArg, src: Src| -> PluginResult<u64> {
        match t.dtype {
            DType::Bf16 => Ok(t.ptr as u64),
            DType::F32 => call.convert_f32(t.ptr as u64, plan.extent(src)),
            other => Err(PluginError::invalid(format!(
                "{}: {} is not f32 or bf16",
                t.what,
                other.name()
            ))),
        }
    };
    let pa = bf16_ptr(a, Src::A)?;
    let pb = bf16_ptr(b, Src::B)?;
    let c_type = match out.dtype {
        DType::Bf16 => cb::cudaDataType::CUDA_R_16BF,
        _ => cb::cudaDataType::CUDA_R_32F,
    };
    let is = Issuer {
        h,
        pa,
        pb,
        pc: out.ptr as u64,
        esz,
        c_type,
    };
    let gemms = &plan.gemms;
    if mode == Issue::PerExpert || gemms.len() == 1 {
        for g in gemms {
            is.gemm_ex(&g.shape(), g.offsets())?;
        }
        return Ok(());
    }
    let api = api();
    let batches = plan.batches();
    let total = gemms.len();
    // Equal-sized experts: one strided batch, one call, nothing to upload.
    if mode == Issue::Auto && batches.len() == 1 && api.strided {
        let b = &batches[0];
        if let Some(st) = b.strides(gemms) {
            let first = gemms[b.members[0]].offsets();
            match is.strided(&b.shape, first, st, total)? {
                s if refused(s) => {} // nothing enqueued: the general path below
                s => return cublas_check("cublasGemmStridedBatchedEx", s),
            }
        }
    }
    // Device addresses of every call, batch after batch (the pointer arrays' order).
    let addrs: Vec<[u64; 3]> = batches
        .iter()
        .flat_map(|b| {
            b.members
                .iter()
                .map(|&i| is.addrs(&b.shape, gemms[i].offsets()))
        })
        .collect();
    // cuBLAS cannot look at the matrices' addresses inside a device pointer array, so
    // the pointer-array entry points assume aligned matrices: use them only when every
    // address is 16-byte aligned (always the case when N and K are multiples of 8 and
    // the tensors are, as allocations are); otherwise strided or per-expert calls.
    let aligned = addrs.iter().flatten().all(|p| p % 16 == 0);
    let mut arrays = None;
    // cublasGemmGroupedBatchedEx: all batches in one call. cuBLAS supports bf16
    // operands there only with a bf16 output (no bf16 × bf16 → f32 combination).
    if mode != Issue::Batched && aligned && api.grouped && out.dtype == DType::Bf16 {
        let d = *arrays.get_or_insert(upload_ptrs(call, &addrs)?);
        match is.grouped(&batches, d, total)? {
            // Nothing was enqueued: fall back to the per-batch calls below.
            s if refused(s) => {}
            s => return cublas_check("cublasGemmGroupedBatchedEx", s),
        }
    }
    // One call per batch: strided when the offsets allow, else the batch's slice of
    // the pointer arrays, else (unaligned, or an entry point missing) per expert.
    let mut start = 0;
    for b in &batches {
        let count = b.members.len();
        let first = gemms[b.members[0]].offsets();
        let strides = if api.strided { b.strides(gemms) } else { None };
        // cuBLAS's answer for the batch, or NOT_SUPPORTED when no batched call applies.
        let st = if count == 1 {
            cb::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
        } else if let Some(st) = strides {
            let s = is.strided(&b.shape, first, st, count)?;
            cublas_check_unless_refused("cublasGemmStridedBatchedEx", s)?
        } else if aligned && api.batched {
            let d = match arrays {
                Some(d) => d,
                None => *arrays.insert(upload_ptrs(call, &addrs)?),
            };
            let s = is.batched(&b.shape, d, total, start, count)?;
            cublas_check_unless_refused("cublasGemmBatchedEx", s)?
        } else {
            cb::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
        };
        if refused(st) {
            for &i in &b.members {
                is.gemm_ex(&b.shape, gemms[i].offsets())?;
            }
        }
        start += count;
    }
    Ok(())
}

/// Whether cuBLAS declined a batched call before enqueuing anything (type combination,
/// architecture or configuration it does not implement): the caller issues the same
/// GEMMs another way.
fn refused(st: cb::cublasStatus_t) -> bool {
    matches!(
        st,
        cb::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
            | cb::cublasStatus_t::CUBLAS_STATUS_ARCH_MISMATCH
    )
}

/// `st` itself when it is success or a refusal ([`refused`]), an error otherwise.
fn cublas_check_unless_refused(
    what: &str,
    st: cb::cublasStatus_t,
) -> PluginResult<cb::cublasStatus_t> {
    if refused(st) {
        return Ok(st);
    }
    cublas_check(what, st).map(|()| st)
}

/// The device pointer arrays of the batched entry points: `3 · P` addresses (all A,
/// then all B, then all C) in stream-ordered scratch, copied from host memory on the
/// stream. The copy is from pageable memory, which the driver stages before
/// `cuMemcpyHtoDAsync` returns (as the host's own uploads rely on), so the host vector
/// may be dropped right after; the scratch is freed after the GEMMs in stream order.
fn upload_ptrs(call: &mut Call, addrs: &[[u64; 3]]) -> PluginResult<u64> {
    let host: Vec<u64> = (0..3)
        .flat_map(|t| addrs.iter().map(move |a| a[t]))
        .collect();
    let d = call.alloc(host.len() * 8)?;
    // SAFETY: `d` holds host.len() u64 (allocated above on this stream); the pinned ring
    // (`MXHOST_PINNED_UPLOADS=1`) or a pageable copy, staged before returning.
    unsafe { mxhost_plugin_common::staging::upload_slice(call.stream, d, &host) }
        .map_err(drv("cuMemcpyHtoDAsync (cuBLAS pointer arrays)"))?;
    Ok(d)
}

/// Issues the GEMMs of one request: the handle (bound to the stream, under its mutex),
/// the bf16 operands' and the output's device addresses and the output type. alpha = 1,
/// beta = 0 (f32 host scalars: default pointer mode), `CUBLAS_COMPUTE_32F`.
struct Issuer {
    h: cb::cublasHandle_t,
    pa: u64,
    pb: u64,
    pc: u64,
    esz: usize,
    c_type: cb::cudaDataType,
}

const ALPHA: f32 = 1.0;
const BETA: f32 = 0.0;
const BF16: cb::cudaDataType = cb::cudaDataType::CUDA_R_16BF;
const COMPUTE: cb::cublasComputeType_t = cb::cublasComputeType_t::CUBLAS_COMPUTE_32F;
const ALGO: cb::cublasGemmAlgo_t = cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;

fn op(t: bool) -> cb::cublasOperation_t {
    if t {
        cb::cublasOperation_t::CUBLAS_OP_T
    } else {
        cb::cublasOperation_t::CUBLAS_OP_N
    }
}

fn scalar(v: &f32) -> *const c_void {
    v as *const f32 as *const c_void
}

fn count_i32(count: usize) -> PluginResult<i32> {
    i32::try_from(count).map_err(|_| {
        PluginError::unsupported(format!(
            "CUDA backend of the bf16 plugin: {count} GEMMs in one request exceed cuBLAS's 32-bit batch count"
        ))
    })
}

impl Issuer {
    /// `[A, B, C]` device addresses of a call of shape `s` at element offsets `o`.
    fn addrs(&self, s: &Shape, o: [usize; 3]) -> [u64; 3] {
        let base = |src| if src == Src::A { self.pa } else { self.pb };
        [
            base(s.a) + (o[0] * 2) as u64,
            base(s.b) + (o[1] * 2) as u64,
            self.pc + (o[2] * self.esz) as u64,
        ]
    }

    /// One `cublasGemmEx`.
    fn gemm_ex(&self, s: &Shape, o: [usize; 3]) -> PluginResult<()> {
        let [a, b, c] = self.addrs(s, o);
        // SAFETY: the handle is bound to this stream and used under the mutex; every
        // matrix lies within its buffer (plan invariants, unit-tested: `a_end`/`b_end`
        // ≤ the converted extent or the tensor's numel, `c_end` ≤ the output's numel);
        // alpha/beta are f32 host scalars (default pointer mode) alive for the call.
        let st = unsafe {
            cb::cublasGemmEx(
                self.h,
                op(s.trans_a),
                op(s.trans_b),
                i32_of(s.m),
                i32_of(s.n),
                i32_of(s.k),
                scalar(&ALPHA),
                a as *const c_void,
                BF16,
                i32_of(s.lda),
                b as *const c_void,
                BF16,
                i32_of(s.ldb),
                scalar(&BETA),
                c as *mut c_void,
                self.c_type,
                i32_of(s.ldc),
                COMPUTE,
                ALGO,
            )
        };
        cublas_check("cublasGemmEx", st)
    }

    /// One `cublasGemmStridedBatchedEx`: `count` calls of shape `s`, call `i` at
    /// `first + i · strides` (elements).
    fn strided(
        &self,
        s: &Shape,
        first: [usize; 3],
        strides: [usize; 3],
        count: usize,
    ) -> PluginResult<cb::cublasStatus_t> {
        let [a, b, c] = self.addrs(s, first);
        let count = count_i32(count)?;
        // SAFETY: as in `gemm_ex`; call i's matrices are the plan's call i (its offsets
        // are `first + i · strides`, unit-tested), so each lies within its buffer.
        Ok(unsafe {
            cb::cublasGemmStridedBatchedEx(
                self.h,
                op(s.trans_a),
                op(s.trans_b),
                i32_of(s.m),
                i32_of(s.n),
                i32_of(s.k),
                scalar(&ALPHA),
                a as *const c_void,
                BF16,
                i32_of(s.lda),
                strides[0] as i64,
                b as *const c_void,
                BF16,
                i32_of(s.ldb),
                strides[1] as i64,
                scalar(&BETA),
                c as *mut c_void,
                self.c_type,
                i32_of(s.ldc),
                strides[2] as i64,
                count,
                COMPUTE,
                ALGO,
            )
        })
    }

    /// One `cublasGemmBatchedEx` over entries `start..start + count` of the pointer
    /// arrays at `arrays` (`total` entries each, see [`upload_ptrs`]).
    fn batched(
        &self,
        s: &Shape,
        arrays: u64,
        total: usize,
        start: usize,
        count: usize,
    ) -> PluginResult<cb::cublasStatus_t> {
        let at = |t: usize| arrays + ((t * total + start) * 8) as u64;
        let count = count_i32(count)?;
        // SAFETY: as in `gemm_ex`; the arrays hold the addresses of the plan's calls of
        // this shape (uploaded earlier on this stream, freed after the call).
        Ok(unsafe {
            cb::cublasGemmBatchedEx(
                self.h,
                op(s.trans_a),
                op(s.trans_b),
                i32_of(s.m),
                i32_of(s.n),
                i32_of(s.k),
                scalar(&ALPHA),
                at(0) as *const *const c_void,
                BF16,
                i32_of(s.lda),
                at(1) as *const *const c_void,
                BF16,
                i32_of(s.ldb),
                scalar(&BETA),
                at(2) as *const *mut c_void,
                self.c_type,
                i32_of(s.ldc),
                count,
                COMPUTE,
                ALGO,
            )
        })
    }

    /// One `cublasGemmGroupedBatchedEx`: group `j` = `batches[j]`, pointer arrays at
    /// `arrays` in [`Plan::batched_offsets`] order. Returns cuBLAS's status (the caller
    /// falls back on NOT_SUPPORTED).
    fn grouped(
        &self,
        batches: &[plan::Batch],
        arrays: u64,
        total: usize,
    ) -> PluginResult<cb::cublasStatus_t> {
        let groups = count_i32(batches.len())?;
        count_i32(total)?;
        let per = |f: &dyn Fn(&Shape) -> usize| -> Vec<i32> {
            batches.iter().map(|b| i32_of(f(&b.shape))).collect()
        };
        let (m, n, k) = (per(&|s| s.m), per(&|s| s.n), per(&|s| s.k));
        let (lda, ldb, ldc) = (per(&|s| s.lda), per(&|s| s.ldb), per(&|s| s.ldc));
        let size: Vec<i32> = batches.iter().map(|b| b.members.len() as i32).collect();
        let ta: Vec<_> = batches.iter().map(|b| op(b.shape.trans_a)).collect();
        let tb: Vec<_> = batches.iter().map(|b| op(b.shape.trans_b)).collect();
        let alpha = vec![ALPHA; batches.len()];
        let beta = vec![BETA; batches.len()];
        let at = |t: usize| arrays + (t * total * 8) as u64;
        // SAFETY: as in `gemm_ex`; the per-group arrays are host vectors of group_count
        // entries alive for the call, the pointer arrays `total` device addresses each
        // (uploaded earlier on this stream, freed after the call), the group sizes sum
        // to `total`.
        Ok(unsafe {
            cb::cublasGemmGroupedBatchedEx(
                self.h,
                ta.as_ptr(),
                tb.as_ptr(),
                m.as_ptr(),
                n.as_ptr(),
                k.as_ptr(),
                alpha.as_ptr() as *const c_void,
                at(0) as *const *const c_void,
                BF16,
                lda.as_ptr(),
                at(1) as *const *const c_void,
                BF16,
                ldb.as_ptr(),
                beta.as_ptr() as *const c_void,
                at(2) as *const *mut c_void,
                self.c_type,
                ldc.as_ptr(),
                groups,
                size.as_ptr(),
                COMPUTE,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_modes_parse() {
        assert_eq!(parse_issue(None), Ok(Issue::Auto));
        assert_eq!(parse_issue(Some("")), Ok(Issue::Auto));
        assert_eq!(parse_issue(Some(" auto ")), Ok(Issue::Auto));
        assert_eq!(parse_issue(Some("grouped")), Ok(Issue::Grouped));
        assert_eq!(parse_issue(Some("batched")), Ok(Issue::Batched));
        assert_eq!(parse_issue(Some("per-expert")), Ok(Issue::PerExpert));
        let e = parse_issue(Some("loop")).unwrap_err();
        assert!(e.contains(ISSUE_ENV) && e.contains("per-expert"), "{e}");
    }

    #[test]
    fn refusals_fall_back_and_errors_do_not() {
        use cb::cublasStatus_t::*;
        assert!(refused(CUBLAS_STATUS_NOT_SUPPORTED) && refused(CUBLAS_STATUS_ARCH_MISMATCH));
        assert!(!refused(CUBLAS_STATUS_SUCCESS) && !refused(CUBLAS_STATUS_INVALID_VALUE));
        assert_eq!(
            cublas_check_unless_refused("x", CUBLAS_STATUS_SUCCESS).ok(),
            Some(CUBLAS_STATUS_SUCCESS)
        );
        assert!(cublas_check_unless_refused("x", CUBLAS_STATUS_EXECUTION_FAILED).is_err());
    }

    #[test]
    fn entry_points_are_probed_without_calling_them() {
        if !cublas_present() {
            eprintln!("skipped: libcublas not loadable here");
            return;
        }
        let a = api();
        assert!(a.batched && a.strided, "cuBLAS without the batched GEMMs");
        eprintln!("cublasGemmGroupedBatchedEx exported: {}", a.grouped);
    }
}
