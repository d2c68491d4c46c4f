//! The cuBLASLt side of [`super`]: the handle per context, one problem's descriptors, its
//! heuristic candidates, and a GEMM run with one of them.

use super::StridedGemm;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::result as cr;
use cudarc::driver::sys as cu;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::cuda::drv;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

fn lt_check(what: &str, st: lt::cublasStatus_t) -> PluginResult<()> {
    if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(PluginError::backend(format!(
            "cuBLASLt {what} failed: {st:?}"
        )))
    }
}

/// cuBLASLt's handle for the current context (created once, kept for the process).
fn lt_handle() -> PluginResult<lt::cublasLtHandle_t> {
    struct H(lt::cublasLtHandle_t);
    // SAFETY: a cuBLASLt handle may be used from any thread; it holds no per-call state.
    unsafe impl Send for H {}
    static HANDLES: OnceLock<Mutex<HashMap<usize, H>>> = OnceLock::new();
    let ctx = mxhost_plugin_common::cuda::current_context();
    let mut map = HANDLES
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(h) = map.get(&ctx) {
        return Ok(h.0);
    }
    let mut h: lt::cublasLtHandle_t = std::ptr::null_mut();
    // SAFETY: out-parameter.
    lt_check("cublasLtCreate", unsafe { lt::cublasLtCreate(&mut h) })?;
    map.insert(ctx, H(h));
    Ok(h)
}

/// The descriptors of one problem, destroyed on drop.
pub(super) struct LtProblem {
    handle: lt::cublasLtHandle_t,
    op: lt::cublasLtMatmulDesc_t,
    la: lt::cublasLtMatrixLayout_t,
    lb: lt::cublasLtMatrixLayout_t,
    lc: lt::cublasLtMatrixLayout_t,
}

impl Drop for LtProblem {
    fn drop(&mut self) {
        // SAFETY: each was created by `new` (or is null, which the destroy calls accept) and is
        // used by no enqueued work (cuBLASLt copies what it needs at enqueue time).
        unsafe {
            lt::cublasLtMatrixLayoutDestroy(self.la);
            lt::cublasLtMatrixLayoutDestroy(self.lb);
            lt::cublasLtMatrixLayoutDestroy(self.lc);
            lt::cublasLtMatmulDescDestroy(self.op);
        }
    }
}

impl LtProblem {
    /// # Safety
    /// A context is current.
    pub(super) unsafe fn new(g: &StridedGemm) -> PluginResult<LtProblem> {
        let mut p = LtProblem {
            handle: lt_handle()?,
            op: std::ptr::null_mut(),
            la: std::ptr::null_mut(),
            lb: std::ptr::null_mut(),
            lc: std::ptr::null_mut(),
        };
        // cublasOperation_t's values (CUBLAS_OP_N = 0, CUBLAS_OP_T = 1), as cuBLASLt reads
        // the attribute: an int32
        let op_of = |t: bool| -> i32 { i32::from(t) };
        // SAFETY (every call below): out-parameters and attribute values of the sizes given.
        unsafe {
            lt_check(
                "cublasLtMatmulDescCreate",
                lt::cublasLtMatmulDescCreate(
                    &mut p.op,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType_t::CUDA_R_32F,
                ),
            )?;
            for (attr, t) in [
                (
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                    g.trans_a,
                ),
                (
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                    g.trans_b,
                ),
            ] {
                let o = op_of(t);
                lt_check(
                    "cublasLtMatmulDescSetAttribute",
                    lt::cublasLtMatmulDescSetAttribute(
                        p.op,
                        attr,
                        &o as *const _ as *const c_void,
                        std::mem::size_of_val(&o),
                    ),
                )?;
            }
            let bf16 = lt::cudaDataType_t::CUDA_R_16BF;
            let out = if g.out_bf16 {
                bf16
            } else {
                lt::cudaDataType_t::CUDA_R_32F
            };
            // stored (rows, cols) of each operand: op N stores the m×k / k×n it is
            let (ar, ac) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
            let (br, bc) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
            for (l, ty, rows, cols, ld, stride) in [
                (&mut p.la, bf16, ar, ac, g.lda, g.strides.0),
                (&mut p.lb, bf16, br, bc, g.ldb, g.strides.1),
                (&mut p.lc, out, g.m, g.n, g.ldc, g.strides.2),
            ] {
                lt_check(
                    "cublasLtMatrixLayoutCreate",
                    lt::cublasLtMatrixLayoutCreate(l, ty, rows as u64, cols as u64, ld as i64),
                )?;
                let count: i32 = g.batch;
                lt_check(
                    "cublasLtMatrixLayoutSetAttribute",
                    lt::cublasLtMatrixLayoutSetAttribute(
                        *l,
                        lt::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                        &count as *const i32 as *const c_void,
                        4,
                    ),
                )?;
                let s: i64 = stride;
                lt_check(
                    "cublasLtMatrixLayoutSetAttribute",
                    lt::cublasLtMatrixLayoutSetAttribute(
                        *l,
                        lt::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                        &s as *const i64 as *const c_void,
                        8,
                    ),
                )?;
            }
        }
        Ok(p)
    }

    /// cuBLASLt's candidates with at most `max_ws` bytes of workspace and FP32 reductions.
    pub(super) fn candidates(
        &self,
        max_ws: usize,
    ) -> PluginResult<Vec<lt::cublasLtMatmulHeuristicResult_t>> {
        let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
        // SAFETY: out-parameter.
        lt_check("cublasLtMatmulPreferenceCreate", unsafe {
            lt::cublasLtMatmulPreferenceCreate(&mut pref)
        })?;
        let ws = max_ws as u64;
        // no partial sums reduced in the output type (bf16): only none or FP32
        let mask: u32 = lt::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_NONE as u32
            | lt::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE as u32;
        const MAX: usize = 8;
        // SAFETY: the zeroed struct is plain data that the heuristic overwrites.
        let mut res: [lt::cublasLtMatmulHeuristicResult_t; MAX] = unsafe { std::mem::zeroed() };
        let mut n = 0i32;
        // SAFETY: attribute values of the sizes given; `res` holds MAX results; the
        // descriptors are live (self).
        let r = unsafe {
            lt_check(
                "cublasLtMatmulPreferenceSetAttribute",
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    &ws as *const u64 as *const c_void,
                    8,
                ),
            )
            .and_then(|()| {
                lt_check(
                    "cublasLtMatmulPreferenceSetAttribute",
                    lt::cublasLtMatmulPreferenceSetAttribute(
                        pref,
                        lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                        &mask as *const u32 as *const c_void,
                        4,
                    ),
                )
            })
            .and_then(|()| {
                lt_check(
                    "cublasLtMatmulAlgoGetHeuristic",
                    lt::cublasLtMatmulAlgoGetHeuristic(
                        self.handle,
                        self.op,
                        self.la,
                        self.lb,
                        self.lc,
                        self.lc,
                        pref,
                        MAX as i32,
                        res.as_mut_ptr(),
                        &mut n,
                    ),
                )
            })
        };
        // SAFETY: created above.
        unsafe { lt::cublasLtMatmulPreferenceDestroy(pref) };
        r?;
        Ok(res[..n.clamp(0, MAX as i32) as usize]
            .iter()
            .filter(|h| h.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS)
            .copied()
            .collect())
    }

    /// Enqueues the GEMM with `algo`, its workspace allocated and freed on `stream`.
    ///
    /// # Safety
    /// As [`run`]'s.
    pub(super) unsafe fn run(
        &self,
        stream: cu::CUstream,
        (a, b, c): (u64, u64, u64),
        algo: &lt::cublasLtMatmulAlgo_t,
        ws_bytes: usize,
    ) -> PluginResult<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: stream-ordered allocation on the caller's stream.
        let ws = if ws_bytes > 0 {
            unsafe { cr::malloc_async(stream, ws_bytes) }.map_err(drv("cuMemAllocAsync"))?
        } else {
            0
        };
        // SAFETY: the caller's pointers and stream; the descriptors are live; `ws` holds
        // `ws_bytes` until the free below, which is ordered after the GEMM on the stream.
        let st = unsafe {
            lt::cublasLtMatmul(
                self.handle,
                self.op,
                &alpha as *const f32 as *const c_void,
                a as *const c_void,
                self.la,
                b as *const c_void,
                self.lb,
                &beta as *const f32 as *const c_void,
                c as *const c_void,
                self.lc,
                c as *mut c_void,
                self.lc,
                algo,
                ws as *mut c_void,
                ws_bytes,
                stream as lt::cudaStream_t,
            )
        };
        if ws != 0 {
            // SAFETY: allocated above on this stream.
            (unsafe { cr::free_async(ws, stream) }).map_err(drv("cuMemFreeAsync"))?;
        }
        lt_check("cublasLtMatmul", st)
    }
}
