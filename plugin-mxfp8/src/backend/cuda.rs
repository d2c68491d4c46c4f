//! The CUDA backend: requests whose tensors are in CUDA device memory, computed by the
//! exact kernels of `plugin-mxfp8/cuda/` (see its README for signatures, launch rules and
//! workspace layouts; `cuda/bench/bench.py` drives the same passes from Python).
//!
//! - Context: the **primary context** of the device named by the tensors'
//!   `device_ordinal`, i.e. the one the host allocated them in. Work is launched on the
//!   host's stream (`desc.stream`, a raw `CUstream`); temporary workspace is allocated and
//!   freed stream-ordered on that stream (`cuMemAllocAsync`/`cuMemFreeAsync`), so a call
//!   never synchronizes. The host synchronizes before it reads results back.
//! - Kernels: compiled with NVRTC for the device's architecture on first use and cached
//!   on disk ([`crate::kernels`]): `sm_90a` on Hopper (the fast path below), the
//!   **portable build** (`compute_XY`) on any other GPU of compute capability 8.0 or newer,
//!   or on any GPU with `MXHOST_MX_PORTABLE=1` (or `=compute_XY`).
//! - Portable build: the same quantizers (bit-exact; FP8 conversions in software below
//!   sm_89, no TMA quantizer), and every GEMM pass as dequantize-to-BF16 + cuBLAS
//!   ([`gemm_rows_bf16`], [`wgrad_via_bf16`]): the MX values are exact in bf16, cuBLAS
//!   accumulates in FP32, so results match the FP8 kernels up to summation order. It
//!   needs cuBLAS; without it GEMMs return Unsupported.
//! - Quantize: 1×32 along the last axis = `ROWS`; 1×32 along axis rank−2 = a `COLS`
//!   pass (written transposed) and a byte transpose back; 32×32 = `TILE`. Bit-exact with
//!   the CPU backend.
//! - Dequantize: `mx_dequantize` (cuda/mx_dequantize.cu), every layout.
//! - Grouped GEMM: operands are brought to the K-major FP8 layouts the GEMM reads
//!   (quantizing dense operands in the canonical layouts of docs/numerics.md, transposing
//!   where needed), E8M0 scales become FP32 tables (`mx_scales_to_f32`), then one
//!   GEMM launch: `mx_tgemm_*` (TMA, the default) or `mx_gemm_*` (cp.async), chosen by
//!   `MXHOST_MX_GEMM_KERNEL=tgemm|gemm` (see [`launch_gemm`]; a launch the TMA kernels
//!   cannot take runs on `mx_gemm_*`, same results; `MXHOST_MX_GEMM_TRACE=1` logs every
//!   GEMM launch and any fallback to stderr). Forward/dgrad with large experts
//!   ([`cublas::bf16_rows_faster`]) and wgrad ([`cublas::wgrad_path`]) run as
//!   dequantize-to-BF16 + cuBLAS instead, which measured faster there
//!   (`MXHOST_MX_FWD_DGRAD` / `MXHOST_MX_WGRAD` = `fp8` force the FP8 kernel).
//!   Requests the kernels cannot run exactly
//!   (reduction length not a multiple of 16, pre-quantized layouts with scales along the
//!   wrong axis, more than 1024 experts, ...) return Unsupported with the reason, never a
//!   wrong result.

use super::cublas;
use crate::kernels::{self, Unit};
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{DType, GemmPass, MxFormat, ScaleMode, WeightLayout};
use mxhost_plugin_common::args::{
    Blocking, DequantizeArgs, GemmArgs, MxArg, OperandArg, QuantizeArgs, TensorArg,
};
use mxhost_plugin_common::cuda::{drv, retain_primary_context, RetainedContext, StreamScratch};
use mxhost_plugin_common::entry::Backend;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::result as cr;
use cudarc::driver::sys as cu;

mod bf16_path;
use bf16_path::{dequantize_into, gemm_rows_bf16, need_cublas, wgrad_via_bf16, Bf16Weight};

const ROWS: i32 = 1;
const COLS: i32 = 2;
const TILE: i32 = 4;
const TILE_T: i32 = 8;
/// `MX_MAX_E` of the kernels: experts per grouped launch.
const MAX_E: usize = 1024;
const GRID_YZ_MAX: usize = 65535;

pub struct CudaBackend;

/// `MxQuantParams` of mx_quantize.cu (natural C layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct QuantParams {
    inp: u64,
    in_bs: i64,
    r: i32,
    c: i32,
    flags: i32,
    mode: i32,
    qa: u64,
    sa: u64,
    qa_bs: i64,
    sa_bs: i64,
    qt: u64,
    st: u64,
    qt_bs: i64,
    st_bs: i64,
    ldt: i32,
    ldst: i32,
    offs: u64,
    e: i32,
    grouped_tiles: i32,
    /// TILE, bf16 input, C % 8 == 0: the MX values in bf16 `[R][C]` beside `qa`, or 0.
    vals: u64,
}

/// Whether `mx_quantize_t32_*` can take this quantization (mx_quantize.cu,
/// `mx_quant_tile32`): bf16 input, only 32×32 outputs (TILE, TILE_T), rows of whole
/// 16-byte chunks (TMA global stride) and contiguous batches (one map over B·R rows).
/// The input address is checked when the map is encoded.
fn t32_takes(in_bf16: bool, p: &QuantParams) -> bool {
    in_bf16
        && p.flags & (TILE | TILE_T) != 0
        && p.flags & !(TILE | TILE_T) == 0
        && p.c % 8 == 0
        && p.in_bs == p.r as i64 * p.c as i64
}

/// `MxQuantTmaParams` of mx_quantize.cu (the parameter of `mx_quantize_t32_*`): the
/// input's tensor map (bf16 [B·R][C], box 128 × 32, no swizzle) and `MxQuantParams`,
/// 64-byte aligned, 256 B.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct QuantTmaParams {
    tm: [u64; 16],
    p: QuantParams,
}

const _: () = {
    assert!(std::mem::size_of::<QuantParams>() == 128);
    assert!(std::mem::size_of::<QuantTmaParams>() == 256);
};

/// `MxQuantFlatParams` of mx_quantize.cu (natural C layout, 40 bytes: the CUDA side
/// static_asserts the size).
#[repr(C)]
#[derive(Clone, Copy)]
struct QuantFlatParams {
    inp: u64,
    q: u64,
    s: u64,
    nblocks: i64,
    mode: i32,
}
const _: () = assert!(std::mem::size_of::<QuantFlatParams>() == 40);

/// `MxQuantFlatValsParams` of mx_quantize.cu: the flat parameters plus where the MX
/// values go in bf16 (`mx_quantize_rows_vals_*`).
#[repr(C)]
#[derive(Clone, Copy)]
struct QuantFlatValsParams {
    p: QuantFlatParams,
    vals: u64,
}
const _: () = assert!(std::mem::size_of::<QuantFlatValsParams>() == 48);

/// What the flat 1×32 kernel writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FlatOut {
    /// FP8 bytes and scales (`mx_quantize_rows_*`).
    Quantized,
    /// The MX values in bf16 only, at the bytes' address (`mx_fakequant_rows_*`).
    Values,
    /// Both, the values at this 16-byte aligned address (`mx_quantize_rows_vals_*`).
    QuantizedAndValues(u64),
}

/// The flat 1×32 quantizer's round: 16-byte loads per thread (`MXQF_U`) and its CTA cap
/// per SM (`MXQF_CTAS_PER_SM`), as in mx_quantize.cu.
const QUANT_FLAT_U: usize = 4;
const QUANT_FLAT_CTAS_PER_SM: usize = 4;

/// Grid of the flat 1×32 quantizer for `chunks` 16-byte chunks and at most `cap` CTAs:
/// the fewest grid-stride rounds the cap allows, then the fewest CTAs that do them, so
/// every CTA does the same number of rounds (a half-full last round idled half the SMs
/// at the end). Same rule as `mx_quant_flat_grid` in bench/launch.cu.
fn quant_flat_grid(chunks: usize, cap: usize) -> usize {
    let per_round = 256 * QUANT_FLAT_U;
    let rounds = cdiv(chunks, per_round * cap.max(1)).max(1);
    cdiv(chunks, per_round * rounds).max(1)
}

/// `MxGemmParams` of mx_grouped_gemm.cu (natural C layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct GemmParams {
    a: u64,
    lda: i64,
    b: u64,
    ldb: i64,
    b_es: i64,
    sa: u64,
    ldsa: i64,
    sb: u64,
    ldsb: i64,
    sb_es: i64,
    out: u64,
    ldo: i64,
    o_es: i64,
    offs: u64,
    e: i32,
    m: i32,
    n: i32,
    k: i32,
    batched: i32,
    out_t: i32,
}

/// `MxGemmTmaParams` of mx_grouped_gemm.cu (the single parameter of `mx_tgemm_*`):
/// two opaque `CUtensorMap`s (128 B each) and `MxGemmParams`, 64-byte aligned, 448 B.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct TGemmParams {
    tm_a: [u64; 16],
    tm_b: [u64; 16],
    g: GemmParams,
    _pad: [u8; 56],
}

/// `MxGemmTmaParamsO` of mx_grouped_gemm.cu (the parameter of the TMA-store `v2t`
/// kernels, [`Unit::tma_store`]): the parameters above, the output's tensor map (bf16,
/// box 64 × 64, SWIZZLE_128B) and whether to use it (`o_tma = 0`: every tile takes the
/// register epilogue), 640 B.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct TGemmParamsO {
    b: TGemmParams,
    tm_o: [u64; 16],
    o_tma: i32,
    _pad: [u8; 60],
}

const _: () = {
    assert!(std::mem::size_of::<TGemmParamsO>() == 640);
    assert!(std::mem::offset_of!(TGemmParamsO, tm_o) == 448);
    assert!(std::mem::offset_of!(TGemmParamsO, o_tma) == 576);
    assert!(std::mem::size_of::<GemmParams>() == 136);
    assert!(std::mem::size_of::<TGemmParams>() == 448);
    assert!(std::mem::align_of::<TGemmParams>() == 64);
    assert!(std::mem::offset_of!(TGemmParams, tm_a) == 0);
    assert!(std::mem::offset_of!(TGemmParams, tm_b) == 128);
    assert!(std::mem::offset_of!(TGemmParams, g) == 256);
};

struct Dev {
    ctx: RetainedContext,
    /// [`kernels::HOPPER_ARCH`], or the `compute_XY` of the portable build.
    arch: String,
    /// The portable build: no wgmma/TMA kernels; GEMMs through cuBLAS.
    portable: bool,
    sms: u32,
    driver: i32,
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

pub use mxhost_plugin_common::cuda::driver_present;

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
    fn func_opt(&self, unit: Unit, name: &str) -> PluginResult<Option<cu::CUfunction>> {
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
            if let Unit::TGemm { w2d, .. } = unit {
                // 212992 / 216064 / 222208 B dynamic + ~9.2 KB static: fits Hopper's 227 KB
                // opt-in; a device that cannot give it leaves the kernel unusable (→ mx_gemm_*).
                let smem = tgemm_smem(w2d, unit.tma_store()) as i32;
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
fn gemm_smem(w2d: bool) -> u32 {
    kernels::GEMM_STAGES * if w2d { 39040 } else { 40960 }
}

/// Dynamic shared memory of our TMA GEMM instantiations: 6 stages of 35840 (w2d) /
/// 36864 (w1d) bytes + 1024 B slack for the 1024-byte alignment of SWIZZLE_128B tiles
/// (216064 / 222208 B, README); the TMA-store kernels (`tma_store`, w2d only) 5 stages
/// + 2 × 16 KB of output staging (212992 B, `mxt_v2t_smem_bytes`).
fn tgemm_smem(w2d: bool, tma_store: bool) -> u32 {
    if tma_store {
        return kernels::TGEMM_STORE_STAGES * 35840 + 2 * 16384 + 1024;
    }
    kernels::TGEMM_STAGES * if w2d { 35840 } else { 36864 } + 1024
}

/// One call's launch context: device, stream and stream-ordered scratch buffers.
struct Call {
    dev: &'static Dev,
    stream: cu::CUstream,
    scratch: StreamScratch,
}

fn cdiv(a: usize, b: usize) -> usize {
    a.div_ceil(b)
}
fn rup(a: usize, b: usize) -> usize {
    a.div_ceil(b) * b
}
fn fmt_code(f: MxFormat) -> u8 {
    match f {
        MxFormat::E4m3 => 0,
        MxFormat::E5m2 => 1,
    }
}
fn mode_code(m: ScaleMode) -> i32 {
    match m {
        ScaleMode::Rceil => 0,
        ScaleMode::Floor => 1,
        ScaleMode::Even => 2,
    }
}
fn i32_of(what: &str, v: usize) -> PluginResult<i32> {
    i32::try_from(v).map_err(|_| {
        PluginError::unsupported(format!(
            "CUDA backend: {what} = {v} exceeds the kernels' 32-bit index range"
        ))
    })
}
fn ptr(t: &TensorArg) -> u64 {
    t.ptr as u64
}

fn arg<T>(v: &T) -> *mut c_void {
    v as *const T as *mut c_void
}

impl Call {
    fn new(ordinal: i32, stream: *mut c_void) -> PluginResult<Call> {
        Ok(Call {
            dev: device(ordinal)?,
            stream: stream as cu::CUstream,
            scratch: StreamScratch::new(stream as cu::CUstream),
        })
    }

    fn alloc(&mut self, bytes: usize) -> PluginResult<u64> {
        self.scratch.alloc(bytes, "workspace")
    }

    fn zero(&self, p: u64, bytes: usize) -> PluginResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `p` addresses at least `bytes` device bytes (host output or scratch).
        unsafe { cr::memset_d8_async(p, 0, bytes, self.stream) }.map_err(drv("cuMemsetD8Async"))
    }

    fn launch(
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
    }

    fn quant(
        &self,
        in_bf16: bool,
        fmt: u8,
        p: &QuantParams,
        gy: usize,
        gz: usize,
    ) -> PluginResult<()> {
        let fmt_name = if fmt == 0 { "e4m3" } else { "e5m2" };
        // 32×32 tiles (and their transposed copy) from bf16 rows TMA can describe: the
        // kernel whose ring is filled by one 2D TMA load per tile (mx_quantize.cu,
        // mx_quant_tile32); same launch contract and bytes. Its tensor map covers all
        // batches as gz·R rows, so the batches must be contiguous.
        let tma_map = (t32_takes(in_bf16, p) && tensor_map_available(self.dev))
            .then(|| {
                let rows = (gz as u64) * p.r as u64;
                encode_2d_box(
                    p.inp,
                    p.c as u64,
                    rows,
                    p.c as u64 * 2,
                    true,
                    [128, 32],
                    false,
                )
                .ok()
            })
            .flatten();
        let name = if tma_map.is_some() {
            format!("mx_quantize_t32_bf16_{fmt_name}")
        } else {
            format!(
                "mx_quantize_{}_{fmt_name}",
                if in_bf16 { "bf16" } else { "f32" }
            )
        };
        let gx = cdiv(p.c as usize, 128);
        // `gy` = row tiles T; any grid y in 1..=T is valid (mx_quantize.cu "Launch
        // contract"): ~4 tiles per CTA, but at least ~16 CTAs per SM when T allows. 32×32
        // tiles from f32 input take 2 (the register prefetch: 80–82 % of copy bandwidth at 2
        // vs 75–78 % at 4 on the H200, run 9); from bf16 the rings (cp.async in
        // mx_quantize_*, TMA in mx_quantize_t32_*) want tiles to prefetch (runs 36, 40).
        let per_cta = if p.flags & (TILE | TILE_T) != 0 && !in_bf16 {
            2
        } else {
            4
        };
        let gy = gy.min(cdiv(gy, per_cta).max(cdiv(16 * self.dev.sms as usize, (gx * gz).max(1))));
        // The TMA kernel takes the tensor map in front of the same parameters.
        let tp = tma_map.map(|tm| QuantTmaParams { tm, p: *p });
        let param = match &tp {
            Some(tp) => arg(tp),
            None => arg(p),
        };
        self.launch(
            Unit::Quantize,
            &name,
            (gx, gy, gz),
            (256, 1, 1),
            0,
            &mut [param],
        )
    }

    /// E8M0 bytes → FP32 table (see `mx_scales_to_f32`); returns the table.
    #[allow(clippy::too_many_arguments)]
    fn scales_f32(
        &mut self,
        s: u64,
        ise: i64,
        (isr, rdv): (i64, i32),
        isc: i64,
        r: usize,
        c: usize,
        rp: usize,
        cp: usize,
        batch: usize,
        stage_major: bool,
    ) -> PluginResult<u64> {
        let out = self.alloc(batch * rp * cp * 4)?;
        let (osr, ocg) = if stage_major {
            (4i64, 4 * rp as i64)
        } else {
            (cp as i64, 4i64)
        };
        let ose = (rp * cp) as i64;
        let (r, c, rp32, cp32) = (
            i32_of("scale rows", r)?,
            i32_of("scale cols", c)?,
            i32_of("scale rows", rp)?,
            i32_of("scale cols", cp)?,
        );
        let (outv, inv) = (out, s);
        self.launch(
            Unit::Quantize,
            "mx_scales_to_f32",
            (cdiv(rp * cp, 256), batch, 1),
            (256, 1, 1),
            0,
            &mut [
                arg(&inv),
                arg(&ise),
                arg(&isr),
                arg(&isc),
                arg(&outv),
                arg(&ose),
                arg(&osr),
                arg(&ocg),
                arg(&r),
                arg(&c),
                arg(&rp32),
                arg(&cp32),
                arg(&rdv),
            ],
        )?;
        Ok(out)
    }

    /// out[b][c][r] = in[b][r][c] (bytes).
    fn transpose(&self, src: u64, dst: u64, batch: usize, r: usize, c: usize) -> PluginResult<()> {
        let (r32, c32) = (i32_of("rows", r)?, i32_of("cols", c)?);
        self.launch(
            Unit::Aux,
            "mx_transpose_u8",
            (cdiv(c, 128), cdiv(r, 128), batch),
            (256, 1, 1),
            0,
            &mut [arg(&src), arg(&dst), arg(&r32), arg(&c32)],
        )
    }

    /// Ungrouped 1×32 quantization along the last axis of a `[rows, cols]` matrix,
    /// chunked along rows to respect the grid limit.
    #[allow(clippy::too_many_arguments)]
    fn quant_rows(
        &self,
        x: u64,
        in_bf16: bool,
        rows: usize,
        cols: usize,
        fmt: u8,
        mode: i32,
        q: u64,
        s: u64,
    ) -> PluginResult<()> {
        let esize = if in_bf16 { 2 } else { 4 };
        // C % 32 == 0: the tensor is one run of whole blocks; the flat kernel reads it in
        // 512-byte warp loads (docs/perf.md run 28). Otherwise the tiled kernel.
        if cols.is_multiple_of(32) && x.is_multiple_of(16) && q.is_multiple_of(8) {
            let nblocks = rows * (cols / 32);
            return self.flat_rows(x, in_bf16, nblocks, fmt, mode, (q, s), FlatOut::Quantized);
        }
        let chunk = GRID_YZ_MAX * 32;
        let cb = cdiv(cols, 32);
        let mut r0 = 0;
        while r0 < rows {
            let n = chunk.min(rows - r0);
            let p = QuantParams {
                inp: x + (r0 * cols * esize) as u64,
                r: i32_of("rows", n)?,
                c: i32_of("cols", cols)?,
                flags: ROWS,
                mode,
                qa: q + (r0 * cols) as u64,
                sa: s + (r0 * cb) as u64,
                ..Default::default()
            };
            self.quant(in_bf16, fmt, &p, cdiv(n, 32), 1)?;
            r0 += n;
        }
        Ok(())
    }

    /// The flat 1×32 kernel over `nblocks` 32-element blocks of a row-major tensor whose
    /// last axis is a multiple of 32: `mx_quantize_rows_*` into FP8 `q` and scales `s`,
    /// `mx_fakequant_rows_*` (the same blocks as their MX values in bf16 at `q`), or
    /// `mx_quantize_rows_vals_*` (both), as `what` says.
    #[allow(clippy::too_many_arguments)]
    fn flat_rows(
        &self,
        x: u64,
        in_bf16: bool,
        nblocks: usize,
        fmt: u8,
        mode: i32,
        (q, s): (u64, u64),
        what: FlatOut,
    ) -> PluginResult<()> {
        if nblocks == 0 {
            return Ok(());
        }
        let p = QuantFlatParams {
            inp: x,
            q,
            s,
            nblocks: nblocks as i64,
            mode,
        };
        let grid = quant_flat_grid(
            nblocks * if in_bf16 { 4 } else { 8 },
            QUANT_FLAT_CTAS_PER_SM * self.dev.sms as usize,
        );
        let kind = match what {
            FlatOut::Quantized => "quantize_rows",
            FlatOut::Values => "fakequant_rows",
            FlatOut::QuantizedAndValues(_) => "quantize_rows_vals",
        };
        let name = format!(
            "mx_{kind}_{}_{}",
            if in_bf16 { "bf16" } else { "f32" },
            if fmt == 0 { "e4m3" } else { "e5m2" }
        );
        let pv = QuantFlatValsParams {
            p,
            vals: match what {
                FlatOut::QuantizedAndValues(v) => v,
                _ => 0,
            },
        };
        let param = match what {
            FlatOut::QuantizedAndValues(_) => arg(&pv),
            _ => arg(&p),
        };
        self.launch(
            Unit::Quantize,
            &name,
            (grid, 1, 1),
            (256, 1, 1),
            0,
            &mut [param],
        )
    }

    /// `[rows][cols]` dense values → their MX values (1×32 blocks along the last axis) as
    /// bf16 in `out`, in one pass: bit-identical to `quant_rows` then `mx_dequantize`.
    /// Ok(false) when the flat kernel cannot take the tensor (cols % 32 != 0, or a base not
    /// 16-byte aligned); the caller then quantizes and expands in two passes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fakequant_rows(
        &self,
        x: u64,
        in_bf16: bool,
        rows: usize,
        cols: usize,
        fmt: u8,
        mode: i32,
        out: u64,
    ) -> PluginResult<bool> {
        if !(cols.is_multiple_of(32) && x.is_multiple_of(16) && out.is_multiple_of(16)) {
            return Ok(false);
        }
        if gemm_trace() {
            eprintln!("mxhost-mxfp8: fake-quantize {rows} x {cols} to bf16 with mx_fakequant_rows (one pass)");
        }
        let nblocks = rows * (cols / 32);
        self.flat_rows(x, in_bf16, nblocks, fmt, mode, (out, 0), FlatOut::Values)?;
        Ok(true)
    }
}

fn leading(shape: &[u64]) -> usize {
    shape[..shape.len().saturating_sub(2)]
        .iter()
        .product::<u64>() as usize
}

/// A quantize request with what every kernel choice reads from it.
#[derive(Clone, Copy)]
struct QuantJob<'a> {
    args: &'a QuantizeArgs,
    in_bf16: bool,
    fmt: u8,
    mode: i32,
    rank: usize,
    /// Length of the last axis.
    last: usize,
    block: Blocking,
}

impl<'a> QuantJob<'a> {
    fn new(args: &'a QuantizeArgs) -> PluginResult<Self> {
        let (x, o) = (&args.input, &args.output);
        let block = Blocking::from_abi(o.block)
            .ok_or_else(|| PluginError::invalid("quantize.output: unknown block layout"))?;
        Ok(QuantJob {
            args,
            in_bf16: x.dtype == DType::Bf16,
            fmt: fmt_code(o.format),
            mode: mode_code(o.mode),
            rank: x.shape.len(),
            last: x.shape[x.shape.len() - 1] as usize,
            block,
        })
    }
}

impl Backend for CudaBackend {
    fn quantize(&self, args: &QuantizeArgs) -> PluginResult<()> {
        let (x, o) = (&args.input, &args.output);
        if x.numel == 0 {
            return Ok(());
        }
        let mut call = Call::new(args.ordinal, args.stream)?;
        let job = QuantJob::new(args)?;
        let QuantJob {
            in_bf16,
            fmt,
            mode,
            rank,
            last,
            block,
            ..
        } = job;
        let shape = &x.shape;
        // The transposed copy (ABI 1.1): the COLS and TILE kernels write it in the same
        // pass; after ROWS it is a byte transpose of data and scales.
        let tr = args.transposed.as_ref();
        // The MX values in bf16 (ABI 1.2): written by the flat 1×32 kernel in the same
        // pass where it takes the tensor, else expanded from the bytes just written.
        let vals = args.values.as_ref().map(ptr);
        let flat_vals = vals.filter(|&v| {
            matches!(block, Blocking::Vector { axis } if axis + 1 == rank)
                && last.is_multiple_of(32)
                && ptr(x).is_multiple_of(16)
                && ptr(&o.data).is_multiple_of(8)
                && v.is_multiple_of(16)
        });
        if let Some(v) = flat_vals {
            let nblocks = x.numel / 32;
            let (q, s) = (ptr(&o.data), ptr(&o.scales));
            let what = FlatOut::QuantizedAndValues(v);
            call.flat_rows(ptr(x), in_bf16, nblocks, fmt, mode, (q, s), what)?;
            if let Some(t) = tr {
                let (batch, r, c) = (leading(shape), shape[rank - 2] as usize, last);
                call.transpose(q, ptr(&t.data), batch, r, c)?;
                call.transpose(s, ptr(&t.scales), batch, r, c / 32)?;
            }
            return Ok(());
        }
        // 32×32 tiles from bf16 rows of whole 16-byte chunks: the tile kernel writes the
        // values in its pass; anything else expands them from the bytes just written.
        let tile_vals = vals.filter(|&v| {
            matches!(block, Blocking::Tile)
                && in_bf16
                && last.is_multiple_of(8)
                && v.is_multiple_of(16)
        });
        self.quantize_bytes(&mut call, &job, tile_vals)?;
        if let (Some(v), None) = (vals, tile_vals) {
            dequantize_into(&call, o, v, true)?;
        }
        Ok(())
    }

    fn dequantize(&self, args: &DequantizeArgs) -> PluginResult<()> {
        if args.output.numel == 0 {
            return Ok(());
        }
        let call = Call::new(args.ordinal, args.stream)?;
        let out_bf16 = args.output.dtype == DType::Bf16;
        dequantize_into(&call, &args.input, ptr(&args.output), out_bf16)
    }

    fn grouped_gemm(&self, args: &GemmArgs) -> PluginResult<()> {
        let mut call = Call::new(args.ordinal, args.stream)?;
        gemm(&mut call, args)
    }
}

impl CudaBackend {
    /// The FP8 bytes and scales of `args.output` (and `args.transposed`), by layout.
    fn quantize_bytes(
        &self,
        call: &mut Call,
        job: &QuantJob<'_>,
        tile_vals: Option<u64>,
    ) -> PluginResult<()> {
        let QuantJob {
            args,
            in_bf16,
            fmt,
            mode,
            rank,
            last,
            block,
        } = *job;
        let (x, o, shape) = (&args.input, &args.output, &args.input.shape);
        let tr = args.transposed.as_ref();
        match block {
            Blocking::Vector { axis } if axis + 1 == rank => {
                call.quant_rows(
                    ptr(x),
                    in_bf16,
                    x.numel / last,
                    last,
                    fmt,
                    mode,
                    ptr(&o.data),
                    ptr(&o.scales),
                )?;
                if let Some(t) = tr {
                    let (batch, r, c) = (leading(shape), shape[rank - 2] as usize, last);
                    call.transpose(ptr(&o.data), ptr(&t.data), batch, r, c)?;
                    call.transpose(ptr(&o.scales), ptr(&t.scales), batch, r, cdiv(c, 32))?;
                }
                Ok(())
            }
            Blocking::Vector { axis } if axis + 2 == rank => {
                // COLS writes data [C][R] and scales [C][RB] per batch; transpose both back.
                let (batch, r, c) = (leading(shape), shape[rank - 2] as usize, last);
                let rb = cdiv(r, 32);
                let (qt, st) = match tr {
                    Some(t) => (ptr(&t.data), ptr(&t.scales)),
                    None => (call.alloc(batch * r * c)?, call.alloc(batch * rb * c)?),
                };
                let p = QuantParams {
                    inp: ptr(x),
                    in_bs: (r * c) as i64,
                    r: i32_of("rows", r)?,
                    c: i32_of("cols", c)?,
                    flags: COLS,
                    mode,
                    qt,
                    st,
                    qt_bs: (c * r) as i64,
                    st_bs: (c * rb) as i64,
                    ldt: i32_of("rows", r)?,
                    ldst: rb as i32,
                    ..Default::default()
                };
                call.quant(in_bf16, fmt, &p, cdiv(r, 32), batch)?;
                call.transpose(qt, ptr(&o.data), batch, c, r)?;
                call.transpose(st, ptr(&o.scales), batch, c, rb)
            }
            Blocking::Tile if rank >= 2 => {
                let (batch, r, c) = (leading(shape), shape[rank - 2] as usize, last);
                let (rb, cb) = (cdiv(r, 32), cdiv(c, 32));
                let mut p = QuantParams {
                    inp: ptr(x),
                    in_bs: (r * c) as i64,
                    r: i32_of("rows", r)?,
                    c: i32_of("cols", c)?,
                    flags: TILE,
                    mode,
                    qa: ptr(&o.data),
                    sa: ptr(&o.scales),
                    qa_bs: (r * c) as i64,
                    sa_bs: (rb * cb) as i64,
                    vals: tile_vals.unwrap_or(0),
                    ..Default::default()
                };
                if let Some(t) = tr {
                    // TILE_T in the same pass: data [C][R], scales [CB][RB] per batch.
                    p.flags |= TILE_T;
                    p.qt = ptr(&t.data);
                    p.st = ptr(&t.scales);
                    p.qt_bs = (r * c) as i64;
                    p.st_bs = (rb * cb) as i64;
                    p.ldt = i32_of("rows", r)?;
                    p.ldst = rb as i32;
                }
                call.quant(in_bf16, fmt, &p, rb, batch)
            }
            other => Err(PluginError::invalid(format!(
                "quantize: block layout {other:?} is invalid for rank {rank}"
            ))),
        }
    }
}

/// A-side operand ready for the GEMM: FP8 `[rows][red]` (K-major) and E8M0 scales
/// `[ceil(rows/rdiv)][ceil(red/32)]`.
#[derive(Clone, Copy)]
struct AMat {
    q: u64,
    s: u64,
    fmt: u8,
    /// Rows per scale row: 1 (1×32 blocks along the reduction), 32 (32×32 tiles).
    rdiv: i32,
}

/// The A operand of forward/dgrad as the caller passed it: pre-quantized (1×32 along the
/// reduction or 32×32 tiles), or dense values to quantize with the call's format and
/// scale mode.
enum RowsA {
    Mx(AMat),
    /// The exact MX values in bf16 `[rows][red]`, kept by quantize (dequantize-to-BF16
    /// path only).
    Values(u64),
    Dense {
        x: u64,
        in_bf16: bool,
        fmt: u8,
        mode: i32,
    },
}

impl RowsA {
    /// The FP8 operand the kernels read: as passed, or the first `rows` rows of the dense
    /// values quantized 1×32 along `red` into this call's scratch.
    fn quantized(&self, call: &mut Call, rows: usize, red: usize) -> PluginResult<AMat> {
        match *self {
            RowsA::Mx(a) => Ok(a),
            RowsA::Values(_) => Err(PluginError::invalid(
                "CUDA backend: the FP8 kernels need the FP8 bytes, not the bf16 values",
            )),
            RowsA::Dense {
                x,
                in_bf16,
                fmt,
                mode,
            } => {
                let q = call.alloc(rows * red)?;
                let s = call.alloc(rows * cdiv(red, 32))?;
                call.quant_rows(x, in_bf16, rows, red, fmt, mode, q, s)?;
                Ok(AMat { q, s, fmt, rdiv: 1 })
            }
        }
    }
}

/// B-side operand: FP8 `[E][cols][red]` (K-major) and E8M0 scales read as
/// `s[e*ise + rb*isr + cb*isc]` (rb = reduction block, cb = column or column block).
struct BMat {
    q: u64,
    s: u64,
    ise: i64,
    isr: i64,
    isc: i64,
    w2d: bool,
    fmt: u8,
}

fn unsupported_layout(pass: &str, role: &str, m: &MxArg, want: &str) -> PluginError {
    let got = match Blocking::from_abi(m.block) {
        Some(Blocking::Vector { axis }) => format!("1×32 blocks along axis {axis}"),
        Some(Blocking::Tile) => "32×32 tiles".into(),
        None => "an unknown layout".into(),
    };
    PluginError::unsupported(format!(
        "CUDA backend: {pass} with a pre-quantized {role} in {got} (shape {:?}) is not supported on the GPU; it needs {want}. Pass the operand dense (quantized in the call) or use --device cpu",
        m.data.shape
    ))
}

fn gemm(call: &mut Call, args: &GemmArgs) -> PluginResult<()> {
    let e = args.offs.len();
    let (rows, n, k) = (args.rows, args.n, args.k);
    let out = &args.out;
    if out.numel == 0 {
        return Ok(());
    }
    if e > MAX_E {
        return Err(PluginError::unsupported(format!(
            "CUDA backend: {e} experts exceed the kernels' limit of {MAX_E} per call"
        )));
    }
    let out_bf16 = out.dtype == DType::Bf16;
    let esz = out.dtype.size_bytes() as usize;
    let (red, pass_name) = match args.pass {
        GemmPass::Forward => (k, "forward"),
        GemmPass::Dgrad => (n, "dgrad"),
        GemmPass::Wgrad => (0, "wgrad"),
    };
    // Degenerate requests: nothing to multiply → zeros (exactly what the math says).
    if e == 0 || (args.pass != GemmPass::Wgrad && red == 0) || args.offs[e - 1] == 0 {
        return call.zero(ptr(out), out.numel * esz);
    }
    if args.pass != GemmPass::Wgrad && red % 16 != 0 {
        return Err(PluginError::unsupported(format!(
            "CUDA backend: {pass_name} needs its reduction length ({}) to be a multiple of 16 (16-byte FP8 rows for the tensor cores); got {red}. Use --device cpu for this shape",
            if args.pass == GemmPass::Forward { "K" } else { "N" }
        )));
    }
    i32_of("rows", rows)?;
    i32_of("n", n)?;
    i32_of("k", k)?;
    let dense_fmt = || args.format();
    let dense_mode = || args.mode().map(mode_code);
    match args.pass {
        GemmPass::Forward | GemmPass::Dgrad => {
            let fwd = args.pass == GemmPass::Forward;
            let cols = if fwd { n } else { k };
            if cols % 2 != 0 {
                return Err(PluginError::unsupported(format!(
                    "CUDA backend: {pass_name} needs an even number of output columns (the epilogue stores pairs); got {cols}. Use --device cpu for this shape"
                )));
            }
            // ---- A: [rows][red], 1×32 along red or 32×32 tiles ----
            let a = match &args.a {
                OperandArg::Dense(t) => RowsA::Dense {
                    x: ptr(t),
                    in_bf16: t.dtype == DType::Bf16,
                    fmt: fmt_code(dense_fmt()?),
                    mode: dense_mode()?,
                },
                // 1×32 along the reduction, or 32×32 tiles (scales [rows/32][red/32]: the
                // same per-row scale for 32 rows, expanded where the GEMM reads it).
                OperandArg::Mx(m) => match Blocking::from_abi(m.block) {
                    Some(b @ (Blocking::Vector { axis: 1 } | Blocking::Tile)) => RowsA::Mx(AMat {
                        q: ptr(&m.data),
                        s: ptr(&m.scales),
                        fmt: fmt_code(m.format),
                        rdiv: if b == Blocking::Tile { 32 } else { 1 },
                    }),
                    _ => {
                        return Err(unsupported_layout(
                            pass_name,
                            if fwd { "X" } else { "dY" },
                            m,
                            "1×32 blocks along its last axis or 32×32 tiles",
                        ))
                    }
                },
            };
            // Operands quantized with their values kept (ABI 1.2): bf16 the cuBLAS path reads
            // as they are. A's must be [rows][red]; W's either stored layout.
            let a_vals = match &args.a {
                OperandArg::Mx(m) => m.values.as_ref().filter(|v| !v.swapped).map(|v| ptr(&v.t)),
                OperandArg::Dense(_) => None,
            };
            let b_vals = match &args.b {
                OperandArg::Mx(m) => m.values.as_ref().map(|v| {
                    if stored_is_kmajor(args, fwd) != v.swapped {
                        Bf16Weight::KMajor(ptr(&v.t))
                    } else {
                        Bf16Weight::StoredRedMajor(ptr(&v.t))
                    }
                }),
                OperandArg::Dense(_) => None,
            };
            let groups = args.groups();
            let rows_per_expert: Vec<usize> = groups.iter().map(|g| g.len()).collect();
            // With the weight's values at hand the BF16 path skips the weight's expansion
            // (and with A's too it is cuBLAS alone): faster than the FP8 kernel on every
            // anchor shape (docs/perf.md runs 70-73; cuBLAS dense 1.15-1.26x torch against
            // the FP8 kernel's 1.02-1.12x, A's pass costing at most 3 B per element).
            let via_bf16 = call.dev.portable
                || match cublas::rows_path()? {
                    cublas::GemmPath::Fp8 => false,
                    cublas::GemmPath::DequantBf16 => true,
                    cublas::GemmPath::Auto => {
                        b_vals.is_some() || cublas::bf16_rows_faster(&rows_per_expert, cols, red)
                    }
                };
            if via_bf16 {
                // A pre-quantized weight whose stored last axis is not the reduction:
                // expanded where it is (cuBLAS reads it transposed) instead of transposed
                // to K-major first. Everything else goes through `weights` (quantizing
                // dense weights, checking layouts) and is expanded K-major.
                let b_kept = b_vals.is_some();
                let b = match &args.b {
                    _ if b_kept => b_vals.expect("checked"),
                    OperandArg::Mx(m)
                        if !stored_is_kmajor(args, fwd)
                            && matches!(
                                Blocking::from_abi(m.block),
                                Some(Blocking::Tile) | Some(Blocking::Vector { axis: 1 })
                            ) =>
                    {
                        let t = call.alloc(e * n * k * 2)?;
                        dequantize_into(call, m, t, true)?;
                        Bf16Weight::StoredRedMajor(t)
                    }
                    // 1×32 along the stored last axis (the reduction), a whole number of
                    // blocks: fake-quantized to bf16 in one pass.
                    OperandArg::Dense(w)
                        if !args.weight_blocks_2d
                            && stored_is_kmajor(args, fwd)
                            && red.is_multiple_of(32)
                            && ptr(w).is_multiple_of(16) =>
                    {
                        let t = call.alloc(e * cols * red * 2)?;
                        let (fmt, mode) = (fmt_code(dense_fmt()?), dense_mode()?);
                        let bf = w.dtype == DType::Bf16;
                        if call.fakequant_rows(ptr(w), bf, e * cols, red, fmt, mode, t)? {
                            Bf16Weight::KMajor(t)
                        } else {
                            // (scratch not 16-byte aligned: two passes)
                            Bf16Weight::Fp8(weights(call, args, fwd, cols, red, e)?)
                        }
                    }
                    _ => Bf16Weight::Fp8(weights(call, args, fwd, cols, red, e)?),
                };
                let a = match a_vals {
                    Some(v) => RowsA::Values(v),
                    None => a,
                };
                let dims = (rows, cols, red);
                return gemm_rows_bf16(call, &a, &b, out, &groups, dims, out_bf16, b_kept);
            }
            let a = a.quantized(call, rows, red)?;
            let b = weights(call, args, fwd, cols, red, e)?;
            let offs_dev = offsets_on_device(call, args)?;
            gemm_rows(call, &a, &b, out, offs_dev, e, rows, cols, red, out_bf16)
        }
        GemmPass::Wgrad => wgrad(call, args, out_bf16),
    }
}

/// The expert offsets in device memory, for the FP8 kernels (the dequantize-to-BF16 path
/// works from the host copy): the caller's device copy if it passed one, else uploaded.
fn offsets_on_device(call: &mut Call, args: &GemmArgs) -> PluginResult<u64> {
    if !args.offs_device.is_null() {
        return Ok(args.offs_device as u64);
    }
    let host: Vec<i32> = args.offs.iter().map(|&o| o as i32).collect();
    let d = call.alloc(host.len() * 4)?;
    // SAFETY: `d` holds host.len() i32; pageable copies are staged before returning.
    unsafe { cr::memcpy_htod_async(d, &host, call.stream) }.map_err(drv("cuMemcpyHtoDAsync"))?;
    Ok(d)
}

/// Whether the weight is "K-major for this pass": its stored last axis (`[E][N][K]`, or
/// `[E][K][N]` with `WeightLayout::Kn`) is the reduction axis (K forward, N dgrad).
fn stored_is_kmajor(args: &GemmArgs, fwd: bool) -> bool {
    fwd != (args.weight_layout == WeightLayout::Kn)
}

/// The weight operand of forward (cols = N, red = K) or dgrad (cols = K, red = N) as
/// a K-major `[E][cols][red]` FP8 tensor with its scales.
fn weights(
    call: &mut Call,
    args: &GemmArgs,
    fwd: bool,
    cols: usize,
    red: usize,
    e: usize,
) -> PluginResult<BMat> {
    let (n, k) = (args.n, args.k);
    let kn = args.weight_layout == WeightLayout::Kn;
    // Stored shape [E][s1][s2]: Nk = [E][N][K], Kn = [E][K][N].
    let (s1, s2) = if kn { (k, n) } else { (n, k) };
    let stored_is_kmajor = stored_is_kmajor(args, fwd);
    let pass_name = if fwd { "forward" } else { "dgrad" };
    let rb = cdiv(red, 32);
    match &args.b {
        OperandArg::Dense(w) => {
            let fmt = fmt_code(args.format()?);
            let mode = mode_code(args.mode()?);
            let bf = w.dtype == DType::Bf16;
            let q = call.alloc(e * n * k)?;
            if args.weight_blocks_2d {
                let (c1b, c2b) = (cdiv(s1, 32), cdiv(s2, 32));
                let s = call.alloc(e * c1b * c2b)?;
                let mut p = QuantParams {
                    inp: ptr(w),
                    in_bs: (s1 * s2) as i64,
                    r: i32_of("rows", s1)?,
                    c: i32_of("cols", s2)?,
                    mode,
                    ..Default::default()
                };
                if stored_is_kmajor {
                    // TILE: q [E][s1=cols][s2=red], scales [E][cols/32][red/32].
                    p.flags = TILE;
                    p.qa = q;
                    p.sa = s;
                    p.qa_bs = (s1 * s2) as i64;
                    p.sa_bs = (c1b * c2b) as i64;
                    call.quant(bf, fmt, &p, c1b, e)?;
                    Ok(BMat {
                        q,
                        s,
                        ise: (c1b * c2b) as i64,
                        isr: 1,
                        isc: c2b as i64,
                        w2d: true,
                        fmt,
                    })
                } else {
                    // TILE_T: q [E][s2=cols][s1=red], scales [E][cols/32][red/32].
                    p.flags = TILE_T;
                    p.qt = q;
                    p.st = s;
                    p.qt_bs = (s1 * s2) as i64;
                    p.st_bs = (c1b * c2b) as i64;
                    p.ldt = i32_of("rows", s1)?;
                    p.ldst = c1b as i32;
                    call.quant(bf, fmt, &p, c1b, e)?;
                    Ok(BMat {
                        q,
                        s,
                        ise: (c1b * c2b) as i64,
                        isr: 1,
                        isc: c1b as i64,
                        w2d: true,
                        fmt,
                    })
                }
            } else if stored_is_kmajor {
                // ROWS over [E*cols][red]: scales [E][cols][rb].
                let s = call.alloc(e * cols * rb)?;
                call.quant_rows(ptr(w), bf, e * cols, red, fmt, mode, q, s)?;
                Ok(BMat {
                    q,
                    s,
                    ise: (cols * rb) as i64,
                    isr: 1,
                    isc: rb as i64,
                    w2d: false,
                    fmt,
                })
            } else {
                // COLS over [E][red][cols]: q [E][cols][red], scales [E][cols][rb].
                let s = call.alloc(e * cols * rb)?;
                let p = QuantParams {
                    inp: ptr(w),
                    in_bs: (s1 * s2) as i64,
                    r: i32_of("rows", s1)?,
                    c: i32_of("cols", s2)?,
                    flags: COLS,
                    mode,
                    qt: q,
                    st: s,
                    qt_bs: (s1 * s2) as i64,
                    st_bs: (cols * rb) as i64,
                    ldt: i32_of("rows", s1)?,
                    ldst: rb as i32,
                    ..Default::default()
                };
                call.quant(bf, fmt, &p, cdiv(s1, 32), e)?;
                Ok(BMat {
                    q,
                    s,
                    ise: (cols * rb) as i64,
                    isr: 1,
                    isc: rb as i64,
                    w2d: false,
                    fmt,
                })
            }
        }
        OperandArg::Mx(m) => {
            let fmt = fmt_code(m.format);
            let block = Blocking::from_abi(m.block);
            // Scales along the reduction axis: vector along axis 2 if the stored last
            // axis is the reduction, else along axis 1.
            let red_axis = if stored_is_kmajor { 2 } else { 1 };
            let w2d = match block {
                Some(Blocking::Tile) => true,
                Some(Blocking::Vector { axis }) if axis == red_axis => false,
                _ => {
                    return Err(unsupported_layout(
                        pass_name,
                        "weight",
                        m,
                        &format!(
                            "32×32 tiles or 1×32 blocks along its reduction axis (axis {red_axis} of this [E, {}, {}] weight)",
                            if kn { "K" } else { "N" },
                            if kn { "N" } else { "K" }
                        ),
                    ))
                }
            };
            let q = if stored_is_kmajor {
                ptr(&m.data)
            } else {
                let t = call.alloc(e * n * k)?;
                call.transpose(ptr(&m.data), t, e, s1, s2)?;
                t
            };
            // Stored scale tensor [E][d1][d2] with (d1, d2) following the stored axes.
            let (d1, d2) = match (w2d, stored_is_kmajor) {
                (true, _) => (cdiv(s1, 32), cdiv(s2, 32)),
                (false, true) => (s1, cdiv(s2, 32)),
                (false, false) => (cdiv(s1, 32), s2),
            };
            let ise = (d1 * d2) as i64;
            // Reduction blocks index the axis of `red`: d2 when K-major, else d1.
            let (isr, isc) = if stored_is_kmajor {
                (1, d2 as i64)
            } else {
                (d2 as i64, 1)
            };
            Ok(BMat {
                q,
                s: ptr(&m.scales),
                ise,
                isr,
                isc,
                w2d,
                fmt,
            })
        }
    }
}

/// forward/dgrad launch: out[rows][cols] = Σ A[rows][red] · B_e[cols][red].
#[allow(clippy::too_many_arguments)]
fn gemm_rows(
    call: &mut Call,
    a: &AMat,
    b: &BMat,
    out: &TensorArg,
    offs: u64,
    e: usize,
    rows: usize,
    cols: usize,
    red: usize,
    out_bf16: bool,
) -> PluginResult<()> {
    let kb = cdiv(red, 32);
    let kb4 = rup(kb, 4);
    let sa = call.scales_f32(a.s, 0, (kb as i64, a.rdiv), 1, rows, kb, rows, kb4, 1, true)?;
    let ldsb = if b.w2d {
        rup(cdiv(cols, 32), 4)
    } else {
        rup(cols, 128)
    };
    let c = if b.w2d { cdiv(cols, 32) } else { cols };
    let sb = call.scales_f32(b.s, b.ise, (b.isr, 1), b.isc, kb, c, kb4, ldsb, e, false)?;
    let p = GemmParams {
        a: a.q,
        lda: red as i64,
        b: b.q,
        ldb: red as i64,
        b_es: (cols * red) as i64,
        sa,
        ldsa: 4 * rows as i64,
        sb,
        ldsb: ldsb as i64,
        sb_es: (kb4 * ldsb) as i64,
        out: ptr(out),
        ldo: cols as i64,
        o_es: 0,
        offs,
        e: e as i32,
        m: rows as i32,
        n: cols as i32,
        k: red as i32,
        batched: 0,
        out_t: 0,
    };
    launch_gemm(call, a.fmt, b.fmt, b.w2d, out_bf16, &p)
}

/// Which grouped-GEMM kernel family `MXHOST_MX_GEMM_KERNEL` asks for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum GemmFamily {
    /// `mx_tgemm_*` (TMA, 128-byte swizzle; the default).
    TGemm,
    /// `mx_gemm_*` (cp.async).
    Gemm,
}

fn gemm_family() -> PluginResult<GemmFamily> {
    match std::env::var("MXHOST_MX_GEMM_KERNEL") {
        Err(_) => Ok(GemmFamily::TGemm),
        Ok(v) => match v.trim() {
            "" | "tgemm" => Ok(GemmFamily::TGemm),
            "gemm" => Ok(GemmFamily::Gemm),
            other => Err(PluginError::invalid(format!(
                "MXHOST_MX_GEMM_KERNEL={other:?}: expected `tgemm` (TMA kernels, the default) or `gemm` (cp.async kernels)"
            ))),
        },
    }
}

/// `MXHOST_MX_GEMM_TRACE=1`: one stderr line per GEMM launch (kernel, shape, fallback).
fn gemm_trace() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var("MXHOST_MX_GEMM_TRACE").as_deref() == Ok("1"))
}

/// A 2-D UINT8 tensor map for `mx_tgemm_*` (README: box 128 × 128, SWIZZLE_128B, L2
/// promotion 256 B, OOB zero fill): `rows` rows of `inner` bytes, `ld` bytes apart.
/// `Err(reason)` where TMA cannot describe the operand.
fn encode_2d(addr: u64, inner: u64, rows: u64, ld: u64) -> Result<[u64; 16], String> {
    encode_2d_box(addr, inner, rows, ld, false, [128, 128], true)
}

/// [`encode_2d`] with the element type (bf16 or bytes), the box (elements) and the
/// swizzle (128 B or none) as arguments: `inner` counts elements, `ld` bytes.
fn encode_2d_box(
    addr: u64,
    inner: u64,
    rows: u64,
    ld: u64,
    bf16: bool,
    boxd: [u32; 2],
    swizzle_128b: bool,
) -> Result<[u64; 16], String> {
    use cu::CUtensorMapDataType::{
        CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_DATA_TYPE_UINT8,
    };
    use cu::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
    use cu::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE;
    use cu::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    use cu::CUtensorMapSwizzle::{CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_SWIZZLE_NONE};
    // cuTensorMapEncodeTiled's rules: global address 16-byte aligned, global strides
    // multiples of 16 bytes and < 2^40, every global dimension in 1..=2^32 (the driver
    // rejects 0 rows: encode 1, the kernel never reads past its row count).
    if !addr.is_multiple_of(16) {
        return Err(format!(
            "operand address {addr:#x} is not 16-byte aligned (TMA)"
        ));
    }
    if !ld.is_multiple_of(16) || ld >= 1 << 40 {
        return Err(format!(
            "row stride {ld} B is not a multiple of 16 bytes below 2^40 (TMA global stride)"
        ));
    }
    let rows = rows.max(1);
    if inner == 0 || inner > 1 << 32 || rows > 1 << 32 {
        return Err(format!(
            "TMA global dimensions {inner} × {rows} out of range"
        ));
    }
    let dims: [u64; 2] = [inner, rows];
    let strides: [u64; 1] = [ld];
    let estr: [u32; 2] = [1, 1];
    let mut tm = cu::CUtensorMap { opaque: [0; 16] };
    // SAFETY: all arrays are live for the call and sized for rank 2; encoding is a pure
    // host call that writes `tm`.
    let rc = unsafe {
        cu::cuTensorMapEncodeTiled(
            &mut tm,
            if bf16 {
                CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
            } else {
                CU_TENSOR_MAP_DATA_TYPE_UINT8
            },
            2,
            addr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxd.as_ptr(),
            estr.as_ptr(),
            CU_TENSOR_MAP_INTERLEAVE_NONE,
            if swizzle_128b {
                CU_TENSOR_MAP_SWIZZLE_128B
            } else {
                CU_TENSOR_MAP_SWIZZLE_NONE
            },
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if rc != cu::CUresult::CUDA_SUCCESS {
        return Err(format!(
            "cuTensorMapEncodeTiled({inner} × {rows}, ld {ld}) returned {rc:?}"
        ));
    }
    Ok(tm.opaque)
}

/// Whether the driver has `cuTensorMapEncodeTiled` (CUDA ≥ 12.0; cudarc panics on a
/// missing symbol, so probe first).
fn tensor_map_available(dev: &Dev) -> bool {
    static A: OnceLock<bool> = OnceLock::new();
    !dev.portable
        && dev.driver >= 12000
        && *A.get_or_init(|| {
            // SAFETY: looks the symbol up in the already loaded driver library.
            unsafe {
                cu::culib()
                    .get::<unsafe extern "C" fn()>(b"cuTensorMapEncodeTiled")
                    .is_ok()
            }
        })
}

/// The `mx_tgemm_*` parameter block for `p` (README "Tensor maps"), or why the TMA
/// kernels cannot run it. What makes `mx_tgemm_*` fall back to `mx_gemm_*`:
/// - a driver without `cuTensorMapEncodeTiled` (CUDA < 12.0);
/// - A or B not 16-byte aligned (TMA global address), SA or SB not 16-byte aligned
///   (bulk copies of the scale tables); our scratch buffers always are, a pre-quantized
///   operand passed in place might not be;
/// - `lda`/`ldb` not multiples of 16 bytes (TMA global strides; forward/dgrad already
///   require K % 16 == 0 and wgrad's padded layout has ld = Mpad, a multiple of 128, so
///   this is a guard, not an expected case); grouped mode also needs `b_es % ldb == 0`;
/// - any other encoding error of the driver.
///
/// (The device not giving the ~225 KB of shared memory is checked when the kernel
/// loads, [`Dev::func_opt`].) Wgrad runs each expert's whole zero-padded segment:
/// both wgrad producers (grouped `COLS` quantizer, `mx_wgrad_relayout`) write zeros
/// with a finite scale there, so every wgrad the backend launches qualifies.
fn tgemm_params(dev: &Dev, p: &GemmParams) -> Result<TGemmParams, String> {
    if !tensor_map_available(dev) {
        return Err(format!(
            "driver {} has no cuTensorMapEncodeTiled",
            dev.driver
        ));
    }
    if !p.sa.is_multiple_of(16) || !p.sb.is_multiple_of(16) {
        return Err("scale tables not 16-byte aligned (bulk copies)".into());
    }
    let (lda, ldb) = (p.lda as u64, p.ldb as u64);
    let (tm_a, tm_b) = if p.batched == 0 {
        if p.k % 16 != 0 || p.ldb <= 0 || p.b_es % p.ldb != 0 {
            return Err(format!(
                "grouped mode needs K % 16 == 0 and b_es % ldb == 0 (K {}, b_es {}, ldb {})",
                p.k, p.b_es, p.ldb
            ));
        }
        let brows = p.e as u64 * (p.b_es / p.ldb) as u64;
        (
            encode_2d(p.a, p.k as u64, p.m as u64, lda)?,
            encode_2d(p.b, p.k as u64, brows, ldb)?,
        )
    } else {
        (
            encode_2d(p.a, lda, p.m as u64, lda)?,
            encode_2d(p.b, ldb, p.n as u64, ldb)?,
        )
    };
    Ok(TGemmParams {
        tm_a,
        tm_b,
        g: *p,
        _pad: [0; 56],
    })
}

/// The output's tensor map for a TMA-store kernel (bf16 `[rows][N]`, box 64 × 64,
/// SWIZZLE_128B; batched: rows = E · M, which needs `o_es == M · ldo` and no transposed
/// store), or `None`: then every tile takes the register epilogue (same results).
fn out_map(p: &GemmParams) -> Option<[u64; 16]> {
    if p.batched != 0 && (p.out_t != 0 || p.o_es != p.m as i64 * p.ldo) {
        return None;
    }
    let rows = if p.batched != 0 {
        p.e as u64 * p.m as u64
    } else {
        p.m as u64
    };
    encode_2d_box(
        p.out,
        p.n as u64,
        rows,
        p.ldo as u64 * 2,
        true,
        [64, 64],
        true,
    )
    .ok()
}

/// One grouped-GEMM launch: `mx_tgemm_*` unless `MXHOST_MX_GEMM_KERNEL=gemm` or the TMA
/// kernels cannot take `p` ([`tgemm_params`]), else `mx_gemm_*` (same math, same results).
fn launch_gemm(
    call: &Call,
    fa: u8,
    fb: u8,
    w2d: bool,
    out_bf16: bool,
    p: &GemmParams,
) -> PluginResult<()> {
    let grid = call.dev.sms as usize;
    let trace = gemm_trace();
    let shape = format!(
        "M {} N {} K {} E {} batched {}",
        p.m, p.n, p.k, p.e, p.batched
    );
    let family = gemm_family()?;
    let mut fallback = None;
    if family == GemmFamily::TGemm {
        let unit = Unit::TGemm {
            fa,
            fb,
            w2d,
            out_bf16,
        };
        let name = unit.gemm_name().unwrap();
        match tgemm_params(call.dev, p) {
            Ok(tp) => {
                if call.dev.func_opt(unit, &name)?.is_some() {
                    let smem = tgemm_smem(w2d, unit.tma_store());
                    let block = (kernels::TGEMM_THREADS, 1, 1);
                    if unit.tma_store() {
                        let tm_o = out_map(p);
                        if trace {
                            let how = if tm_o.is_some() {
                                "TMA store"
                            } else {
                                "register epilogue"
                            };
                            eprintln!("mxhost-plugin-mxfp8: GEMM {name} ({shape}, {how})");
                        }
                        let tpo = TGemmParamsO {
                            b: tp,
                            tm_o: tm_o.unwrap_or([0; 16]),
                            o_tma: tm_o.is_some() as i32,
                            _pad: [0; 60],
                        };
                        return call.launch(
                            unit,
                            &name,
                            (grid, 1, 1),
                            block,
                            smem,
                            &mut [arg(&tpo)],
                        );
                    }
                    if trace {
                        eprintln!("mxhost-plugin-mxfp8: GEMM {name} ({shape})");
                    }
                    return call.launch(unit, &name, (grid, 1, 1), block, smem, &mut [arg(&tp)]);
                }
                fallback = Some(format!(
                    "{name} needs more shared memory than the device gives a block"
                ));
            }
            Err(why) => fallback = Some(why),
        }
    }
    let unit = Unit::Gemm {
        fa,
        fb,
        w2d,
        out_bf16,
    };
    let name = unit.gemm_name().unwrap();
    if trace {
        match &fallback {
            Some(why) => eprintln!(
                "mxhost-plugin-mxfp8: GEMM {name} ({shape}) [fallback from mx_tgemm: {why}]"
            ),
            None => eprintln!("mxhost-plugin-mxfp8: GEMM {name} ({shape})"),
        }
    }
    call.launch(
        unit,
        &name,
        (grid, 1, 1),
        (128 * (kernels::GEMM_NC + 1), 1, 1),
        gemm_smem(w2d),
        &mut [arg(p)],
    )
}

/// wgrad: out_e = dY_eᵀ · X_e over each expert's rows. Both operands go to the GEMM's
/// padded transposed layout `[P][Mpad]` with 1×32 scales along M:
/// - dense: quantized in the call per expert (`COLS`, grouped: blocks restart at each
///   expert, as the CPU backend does);
/// - pre-quantized (1×32 along axis 0, blocks from row 0): relaid exactly by
///   `mx_wgrad_relayout`, each expert shifted by `start_e % 32` so every block keeps its
///   scale; the GEMM sees `m_e + shift_e` rows per expert (the extra ones are zeros).
fn wgrad(call: &mut Call, args: &GemmArgs, out_bf16: bool) -> PluginResult<()> {
    let (n, k, rows) = (args.n, args.k, args.rows);
    let e = args.offs.len();
    let groups = args.groups();
    // The portable build has no FP8 kernel: always the dequantize-to-BF16 path.
    let via_bf16 = if call.dev.portable {
        need_cublas()?;
        true
    } else {
        cublas::wgrad_path()? != cublas::GemmPath::Fp8
    };
    if via_bf16 {
        return wgrad_via_bf16(call, args, &groups, out_bf16);
    }
    let starts: Vec<usize> = groups.iter().map(|g| g.start).collect();
    let sizes: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let offs = offsets_on_device(call, args)?;
    match (&args.a, &args.b) {
        (OperandArg::Dense(dy), OperandArg::Dense(x)) => {
            let mpad: usize = sizes.iter().map(|&m| rup(m, 128)).sum();
            let mp = mpad / 32;
            if mp > GRID_YZ_MAX {
                return Err(PluginError::unsupported(format!(
                    "CUDA backend: wgrad over {mpad} padded rows exceeds the quantizer's grid limit"
                )));
            }
            let fmt = fmt_code(args.format()?);
            let mode = mode_code(args.mode()?);
            let mut cols_t = |t: &TensorArg, p: usize| -> PluginResult<(u64, u64)> {
                let qt = call.alloc(p * mpad)?;
                let st = call.alloc(p * mp)?;
                let qp = QuantParams {
                    inp: ptr(t),
                    r: i32_of("rows", rows)?,
                    c: i32_of("cols", p)?,
                    flags: COLS,
                    mode,
                    qt,
                    st,
                    ldt: i32_of("padded rows", mpad)?,
                    ldst: mp as i32,
                    offs,
                    e: e as i32,
                    grouped_tiles: mp as i32,
                    ..Default::default()
                };
                call.quant(t.dtype == DType::Bf16, fmt, &qp, mp, 1)?;
                Ok((qt, st))
            };
            let dyq = cols_t(dy, n)?;
            let xq = cols_t(x, k)?;
            let ops = ((dyq.0, dyq.1, fmt), (xq.0, xq.1, fmt));
            wgrad_gemm(call, args, ops, mpad, offs, out_bf16)
        }
        (OperandArg::Mx(dy), OperandArg::Mx(x)) => {
            for (m, what) in [(dy, "dY"), (x, "X")] {
                if Blocking::from_abi(m.block) != Some(Blocking::Vector { axis: 0 }) {
                    return Err(unsupported_layout(
                        "wgrad",
                        what,
                        m,
                        "1×32 blocks along M (axis 0), the axis wgrad contracts over",
                    ));
                }
            }
            // Shifted padded layout and the offsets the GEMM sees.
            let mut tbl: Vec<i32> = Vec::with_capacity(4 * e);
            let mut fake_offs: Vec<i32> = Vec::with_capacity(e);
            let (mut seg, mut cum) = (0usize, 0usize);
            for i in 0..e {
                let sh = if sizes[i] == 0 { 0 } else { starts[i] % 32 };
                let m2 = sizes[i] + sh;
                tbl.extend([seg, sh, starts[i], sizes[i]].map(|v| v as i32));
                cum += m2;
                fake_offs.push(i32_of("rows", cum)?);
                seg += rup(m2, 128);
            }
            let mpad = seg;
            i32_of("padded rows", mpad)?;
            let tbl_d = call.alloc(tbl.len() * 4)?;
            let offs_d = call.alloc(e * 4)?;
            // SAFETY: both buffers hold the copied i32s; pageable copies are staged.
            unsafe {
                cr::memcpy_htod_async(tbl_d, &tbl, call.stream).map_err(drv("cuMemcpyHtoDAsync"))?;
                cr::memcpy_htod_async(offs_d, &fake_offs, call.stream)
                    .map_err(drv("cuMemcpyHtoDAsync"))?;
            }
            let mut relayout = |m: &MxArg, p: usize| -> PluginResult<(u64, u64, u8)> {
                let qt = call.alloc(p * mpad)?;
                let st = call.alloc(p * (mpad / 32))?;
                let (q, s) = (ptr(&m.data), ptr(&m.scales));
                let (p32, e32, mpad32) = (i32_of("cols", p)?, e as i32, mpad as i32);
                call.launch(
                    Unit::Aux,
                    "mx_wgrad_relayout",
                    (mpad / 32, cdiv(p, 32), 1),
                    (32, 8, 1),
                    0,
                    &mut [
                        arg(&q),
                        arg(&s),
                        arg(&p32),
                        arg(&tbl_d),
                        arg(&e32),
                        arg(&qt),
                        arg(&st),
                        arg(&mpad32),
                    ],
                )?;
                Ok((qt, st, fmt_code(m.format)))
            };
            let dyq = relayout(dy, n)?;
            let xq = relayout(x, k)?;
            wgrad_gemm(call, args, (dyq, xq), mpad, offs_d, out_bf16)
        }
        _ => Err(PluginError::unsupported(
            "CUDA backend: wgrad with one pre-quantized and one dense operand is not supported by the FP8 kernel (MXHOST_MX_WGRAD=fp8: their M blocks would not line up); the default dequantize-to-BF16 path takes it",
        )),
    }
}

/// The wgrad GEMM on padded transposed operands `(data [P][mpad], scales [P][mpad/32],
/// format)` for dY (P = N) and X (P = K): the FP8 path (`MXHOST_MX_WGRAD=fp8`); the
/// default dequantize-to-BF16 path is [`wgrad_via_bf16`].
fn wgrad_gemm(
    call: &mut Call,
    args: &GemmArgs,
    (dyq, xq): ((u64, u64, u8), (u64, u64, u8)),
    mpad: usize,
    offs: u64,
    out_bf16: bool,
) -> PluginResult<()> {
    let (n, k, e) = (args.n, args.k, args.offs.len());
    let mp = mpad / 32;
    // Output [E][N][K] (Nk) or [E][K][N] (Kn). GEMM rows × cols with out_t = 0 needs an
    // even column count; the transposed store has no such rule. Pick the orientation.
    let kn = args.weight_layout == WeightLayout::Kn;
    // (A = rows operand, B = cols operand, GEMM rows, GEMM cols, out_t)
    let (a, b, pr, qc, out_t) = match (kn, k % 2 == 0, n % 2 == 0) {
        (false, true, _) => (dyq, xq, n, k, 0),
        (false, false, _) => (xq, dyq, k, n, 1),
        (true, _, true) => (xq, dyq, k, n, 0),
        (true, _, false) => (dyq, xq, n, k, 1),
    };
    let sa = call.scales_f32(a.1, 0, (mp as i64, 1), 1, pr, mp, pr, mp, 1, true)?;
    let qp = rup(qc, 128);
    let sb = call.scales_f32(b.1, 0, (1, 1), mp as i64, mp, qc, mp, qp, 1, false)?;
    let (ldo, o_es) = if out_t == 1 {
        (pr as i64, (qc * pr) as i64)
    } else {
        (qc as i64, (pr * qc) as i64)
    };
    let p = GemmParams {
        a: a.0,
        lda: mpad as i64,
        b: b.0,
        ldb: mpad as i64,
        b_es: 0,
        sa,
        ldsa: 4 * pr as i64,
        sb,
        ldsb: qp as i64,
        sb_es: 0,
        out: ptr(&args.out),
        ldo,
        o_es,
        offs,
        e: e as i32,
        m: pr as i32,
        n: qc as i32,
        k: 0,
        batched: 1,
        out_t,
    };
    launch_gemm(call, a.2, b.2, false, out_bf16, &p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TMA quantizer takes bf16 32×32 work with 16-byte rows and contiguous batches,
    /// nothing else (the rest goes to `mx_quantize_*`).
    #[test]
    fn t32_takes_only_what_its_tensor_map_describes() {
        let p = |flags, r: i32, c: i32, in_bs: i64| QuantParams {
            flags,
            r,
            c,
            in_bs,
            ..Default::default()
        };
        assert!(t32_takes(true, &p(TILE | TILE_T, 4096, 4096, 4096 * 4096)));
        assert!(t32_takes(true, &p(TILE, 70, 200, 70 * 200)));
        assert!(t32_takes(true, &p(TILE_T, 96, 8, 96 * 8)));
        assert!(
            !t32_takes(false, &p(TILE | TILE_T, 64, 64, 64 * 64)),
            "f32 input"
        );
        assert!(
            !t32_takes(true, &p(TILE | ROWS, 64, 64, 64 * 64)),
            "row-wise outputs"
        );
        assert!(!t32_takes(true, &p(COLS, 64, 64, 64 * 64)), "32x1 columns");
        assert!(!t32_takes(true, &p(0, 64, 64, 64 * 64)), "nothing to write");
        assert!(
            !t32_takes(true, &p(TILE, 64, 76, 64 * 76)),
            "rows not whole 16-byte chunks"
        );
        assert!(
            !t32_takes(true, &p(TILE, 64, 64, 64 * 64 + 8)),
            "batches not contiguous"
        );
    }

    /// The flat quantizer's grid: within the cap, covers every chunk, and no CTA idles a
    /// whole round (all CTAs do the same number of rounds, the last one maybe partial).
    #[test]
    fn quant_flat_grid_is_balanced_and_capped() {
        let per_round = 256 * QUANT_FLAT_U;
        for cap in [1usize, 7, 528] {
            for chunks in [1usize, 1023, 1024, 8_388_608, 540_672 * 15 + 1, 10_000_019] {
                let g = quant_flat_grid(chunks, cap);
                assert!(
                    (1..=cap).contains(&g),
                    "chunks {chunks} cap {cap}: grid {g}"
                );
                let rounds = cdiv(chunks, g * per_round);
                assert!(g * per_round * rounds >= chunks);
                // one CTA fewer would need another round: the grid is the smallest
                assert!(g == 1 || (g - 1) * per_round * rounds < chunks);
                // and no full round is left idle
                assert!(g * per_round * (rounds - 1) < chunks);
            }
        }
        // shape b's X (32768 x 2048 bf16) on 132 SMs x 4: 16 rounds of 512 CTAs, not 15.5 of 528
        assert_eq!(quant_flat_grid(8_388_608, 528), 512);
    }
}
