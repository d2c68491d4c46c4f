//! wgrad by "dequantize to BF16": the operands' MX values (dense operands fake-quantized
//! 1×32 along M, pre-quantized ones dequantized, in `[rows][P]`) as bf16 — exact: every E4M3/E5M2
//! value times an E8M0 scale fits bf16's 8 exponent and 7 mantissa bits, except scales
//! below 2^-126, which round like any bf16 subnormal — and multiplied by cuBLAS with
//! FP32 accumulation (`CUBLAS_COMPUTE_32F`, reduced-precision reductions disallowed).
//! The products are the ones the FP8 kernel forms; only the summation order differs.
//!
//! Why: with 1×32 scales on *both* operands every k32 step costs an FMUL and an FFMA
//! per output element (docs/perf.md: the FP8 kernel reaches 0.56–0.63× torch BF16 on
//! wgrad, the anchor ceiling is ~0.75×), while BF16 tensor cores need no promotion at
//! all. The issue asks to pick the faster per case: [`wgrad_path`] chooses this path for
//! wgrad when cuBLAS loads (`MXHOST_MX_WGRAD=fp8` forces the FP8 kernel, `bf16` this
//! one), and says so in `MXHOST_MX_GEMM_TRACE`.
//!
//! Forward and dgrad ([`rows_bf16`]) take the same route in the portable build (GPUs other
//! than Hopper), and on Hopper where [`bf16_rows_faster`] says the per-expert GEMMs are
//! large enough for cuBLAS to beat the power-capped FP8 kernel ([`rows_path`],
//! `MXHOST_MX_FWD_DGRAD=auto|fp8|bf16`).
//!
//! Handles: one per (context, stream), created lazily with the stream bound, kept for the
//! process. Equal, evenly spaced experts go out as one strided batch, run by the algorithm
//! [`super::cublas_tune`] measured fastest for that problem (`cublasGemmStridedBatchedEx`'s
//! own or a cuBLASLt candidate), anything else as one `cublasGemmEx` per expert (the bf16
//! plugin has the full grouped/batched issuing logic; wgrad here has few experts or equal
//! ones).

use super::cublas_tune::{self, StridedGemm};
use cudarc::cublas::sys as cb;
use cudarc::driver::sys as cu;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::cuda::{cublas_check as check, with_cublas_handle};
use std::ffi::c_void;
use std::sync::OnceLock;

/// How the CUDA backend runs a GEMM pass on Hopper, from its variable (`auto|fp8|bf16`):
/// `MXHOST_MX_WGRAD` for wgrad ([`wgrad_path`]), `MXHOST_MX_FWD_DGRAD` for forward and dgrad
/// ([`rows_path`]). The portable build always dequantizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmPath {
    /// FP8 wgmma with per-32 FP32 promotion (`mx_tgemm_*`).
    Fp8,
    /// Dequantize both operands to bf16, cuBLAS BF16 GEMM with FP32 accumulation.
    DequantBf16,
    /// The default when cuBLAS loads: per pass (wgrad: always bf16, which measured faster;
    /// forward/dgrad: [`bf16_rows_faster`]). Without cuBLAS the default is `Fp8`.
    Auto,
}

/// The wgrad path (`MXHOST_MX_WGRAD`; `Auto` runs bf16). Read once per process, like
/// `MXHOST_MX_GEMM_TRACE`.
pub fn wgrad_path() -> PluginResult<GemmPath> {
    static P: OnceLock<PluginResult<GemmPath>> = OnceLock::new();
    P.get_or_init(|| {
        parse_path(
            "MXHOST_MX_WGRAD",
            std::env::var("MXHOST_MX_WGRAD").ok().as_deref(),
        )
    })
    .clone()
}

/// The forward/dgrad path (`MXHOST_MX_FWD_DGRAD`). Read once per process.
pub fn rows_path() -> PluginResult<GemmPath> {
    static P: OnceLock<PluginResult<GemmPath>> = OnceLock::new();
    P.get_or_init(|| {
        parse_path(
            "MXHOST_MX_FWD_DGRAD",
            std::env::var("MXHOST_MX_FWD_DGRAD").ok().as_deref(),
        )
    })
    .clone()
}

fn parse_path(var: &str, v: Option<&str>) -> PluginResult<GemmPath> {
    match v.map(str::trim).ok_or(()) {
        Err(_) | Ok("") | Ok("auto") => Ok(if cublas_present() {
            GemmPath::Auto
        } else {
            GemmPath::Fp8
        }),
        Ok("fp8") => Ok(GemmPath::Fp8),
        Ok("bf16") if cublas_present() => Ok(GemmPath::DequantBf16),
        Ok("bf16") => Err(PluginError::unsupported(format!(
            "{var}=bf16 but cuBLAS (libcublas.so.13) could not be loaded; add the CUDA 13 library directory to LD_LIBRARY_PATH"
        ))),
        Ok(other) => Err(PluginError::invalid(format!(
            "{var}={other:?}: expected auto, fp8 or bf16"
        ))),
    }
}

pub use mxhost_plugin_common::cuda::cublas_present;

/// The auto rule for forward/dgrad: dequantize-to-BF16 + cuBLAS when the per-expert GEMMs
/// are large (output columns and reduction length ≥ 2048, ≥ 2048 rows per non-empty expert
/// on average), the promoted FP8 kernel otherwise. Why (docs/perf.md runs 46–47, H200, × torch
/// BF16): on 8 experts of 4096 rows (shapes a, b) the two expansions cost ~0.2 ms and
/// cuBLAS's BF16 GEMMs run ~1.2× torch's grouped GEMM, 1.05–1.09× forward against the FP8
/// kernel's 1.01–1.03× (which the power cap holds, runs 23–26); on 32 experts of 1024 rows
/// (c) and 128 of 256 (d) the FP8 kernel wins, 1.05× against 0.89× and 0.48×.
pub fn bf16_rows_faster(rows_per_expert: &[usize], cols: usize, red: usize) -> bool {
    const BIG: usize = 2048;
    let live: Vec<usize> = rows_per_expert.iter().copied().filter(|&m| m > 0).collect();
    !live.is_empty() && cols >= BIG && red >= BIG && live.iter().sum::<usize>() >= BIG * live.len()
}

/// A GEMM dimension as cuBLAS's `int`, or Unsupported.
fn dim(v: usize) -> PluginResult<i32> {
    i32::try_from(v).map_err(|_| {
        PluginError::unsupported(format!(
            "CUDA backend: a GEMM dimension of {v} exceeds cuBLAS's 32-bit limit"
        ))
    })
}

fn out_type(out_bf16: bool) -> cb::cudaDataType {
    if out_bf16 {
        cb::cudaDataType::CUDA_R_16BF
    } else {
        cb::cudaDataType::CUDA_R_32F
    }
}

/// The non-empty experts of `segs` (`(first row, rows)` per expert) as `(expert, first
/// row, rows)`.
fn live_segments(segs: &[(usize, usize)]) -> Vec<(usize, usize, usize)> {
    segs.iter()
        .enumerate()
        .filter(|(_, s)| s.1 > 0)
        .map(|(e, s)| (e, s.0, s.1))
        .collect()
}

/// One BF16 GEMM in cuBLAS's column-major terms: `C[m×n] = op_a(A) · op_b(B)` with `k`
/// the reduction; the pointers are device addresses (A, B bf16; C f32 or bf16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GemmCall {
    a: u64,
    b: u64,
    c: u64,
    m: usize,
    n: usize,
    k: usize,
}

/// What the calls of one pass share: the operations, leading dimensions and output type.
struct GemmShape {
    op_a: cb::cublasOperation_t,
    op_b: cb::cublasOperation_t,
    lda: usize,
    ldb: usize,
    ldc: usize,
    out_bf16: bool,
}

/// The element strides `(A, B, C)` when `calls` can go out as one strided batch: more
/// than one call, one size, and every pointer advancing by the same step from each call
/// to the next (equal experts at evenly spaced rows and weights).
fn strided_batch(calls: &[GemmCall], out_bf16: bool) -> Option<(i64, i64, i64)> {
    let (c0, c1) = (calls.first()?, calls.get(1)?);
    let esz = if out_bf16 { 2 } else { 4 };
    let step = |f: fn(&GemmCall) -> u64| f(c1) as i64 - f(c0) as i64;
    let (da, db, dc) = (step(|c| c.a), step(|c| c.b), step(|c| c.c));
    let even = calls.windows(2).all(|w| {
        (w[1].m, w[1].n, w[1].k) == (w[0].m, w[0].n, w[0].k)
            && w[1].a as i64 - w[0].a as i64 == da
            && w[1].b as i64 - w[0].b as i64 == db
            && w[1].c as i64 - w[0].c as i64 == dc
    });
    even.then_some((da / 2, db / 2, dc / esz))
}

/// Issue `calls` on `stream` (FP32 accumulation): one `cublasGemmStridedBatchedEx` when
/// [`strided_batch`] allows, else one `cublasGemmEx` each.
///
/// # Safety
/// Every call's operands and output lie in the current context's device memory, live until
/// the enqueued work is done; `stream` is a valid stream of that context.
unsafe fn issue(stream: cu::CUstream, sh: &GemmShape, calls: &[GemmCall]) -> PluginResult<()> {
    let Some(c0) = calls.first().copied() else {
        return Ok(());
    };
    let (lda, ldb, ldc) = (dim(sh.lda)?, dim(sh.ldb)?, dim(sh.ldc)?);
    let ctype = out_type(sh.out_bf16);
    let bf16 = cb::cudaDataType::CUDA_R_16BF;
    let (alpha, beta) = (1.0f32, 0.0f32);
    let scal = |v: &f32| v as *const f32 as *const c_void;
    let compute = cb::cublasComputeType_t::CUBLAS_COMPUTE_32F;
    let algo = cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    with_cublas_handle(stream, |h| {
        if let Some((sa, sb, sc)) = strided_batch(calls, sh.out_bf16) {
            let g = StridedGemm {
                trans_a: sh.op_a == cb::cublasOperation_t::CUBLAS_OP_T,
                trans_b: sh.op_b == cb::cublasOperation_t::CUBLAS_OP_T,
                m: dim(c0.m)?,
                n: dim(c0.n)?,
                k: dim(c0.k)?,
                lda,
                ldb,
                ldc,
                strides: (sa, sb, sc),
                batch: dim(calls.len())?,
                out_bf16: sh.out_bf16,
            };
            // SAFETY: call i reads A/B and writes C at the first call's pointers plus i
            // strides, i.e. exactly the pointers of `calls[i]` (the caller's contract).
            let mut run_default = || {
                let st = unsafe {
                    cb::cublasGemmStridedBatchedEx(
                        h,
                        sh.op_a,
                        sh.op_b,
                        dim(c0.m)?,
                        dim(c0.n)?,
                        dim(c0.k)?,
                        scal(&alpha),
                        c0.a as *const c_void,
                        bf16,
                        lda,
                        sa,
                        c0.b as *const c_void,
                        bf16,
                        ldb,
                        sb,
                        scal(&beta),
                        c0.c as *mut c_void,
                        ctype,
                        ldc,
                        sc,
                        g.batch,
                        compute,
                        algo,
                    )
                };
                check("cublasGemmStridedBatchedEx", st)
            };
            // SAFETY: as above; `run_default` issues exactly `g` on these pointers.
            return unsafe { cublas_tune::run(stream, &g, (c0.a, c0.b, c0.c), &mut run_default) };
        }
        for c in calls {
            // SAFETY: this call's operands and output, by the caller's contract.
            let st = unsafe {
                cb::cublasGemmEx(
                    h,
                    sh.op_a,
                    sh.op_b,
                    dim(c.m)?,
                    dim(c.n)?,
                    dim(c.k)?,
                    scal(&alpha),
                    c.a as *const c_void,
                    bf16,
                    lda,
                    c.b as *const c_void,
                    bf16,
                    ldb,
                    scal(&beta),
                    c.c as *mut c_void,
                    ctype,
                    ldc,
                    compute,
                    algo,
                )
            };
            check("cublasGemmEx", st)?;
        }
        Ok(())
    })
}

/// A row-major bf16 operand `[rows][P]`, i.e. the column-major `P × rows` matrix with
/// leading dimension P: a segment of `len` rows is `P × len` as it stands (the left
/// factor, op N) and `len × P` transposed (the right factor, op T).
struct RowMajor {
    ptr: u64,
    p: usize,
}

impl RowMajor {
    fn at(&self, row0: usize) -> u64 {
        self.ptr + (row0 * self.p * 2) as u64
    }
}

/// The wgrad GEMMs on bf16 operands `dy` `[rows][N]` and `x` `[rows][K]`, expert e
/// reading rows `segs[e].0 .. segs[e].0 + segs[e].1`, into `out`: `[E][N][K]` (or
/// `[E][K][N]` with `kn`), f32 or bf16. Empty experts are zeroed.
///
/// # Safety
/// `dy`/`x` address `rows·N`/`rows·K` bf16 values and `out` `E·N·K` outputs in the
/// current context's device memory, live until the enqueued work is done; every segment
/// lies within its operand; `stream` is a valid stream of that context.
#[allow(clippy::too_many_arguments)]
pub unsafe fn wgrad_bf16(
    stream: cu::CUstream,
    dy: u64,
    x: u64,
    segs: &[(usize, usize)],
    (n, k): (usize, usize),
    kn: bool,
    out: u64,
    out_bf16: bool,
) -> PluginResult<()> {
    let esz = if out_bf16 { 2 } else { 4 };
    let per = n * k;
    for (e, &(_, len)) in segs.iter().enumerate() {
        if len == 0 {
            // SAFETY: expert e's output block lies within the [E][·][·] output.
            unsafe {
                cudarc::driver::result::memset_d8_async(
                    out + (e * per * esz) as u64,
                    0,
                    per * esz,
                    stream,
                )
            }
            .map_err(|e| PluginError::backend(format!("cuMemsetD8Async failed: {e}")))?;
        }
    }
    // Column-major output: Nk = C[K×N] = X_e[K×len] · dY_e[len×N] (ldc K);
    // Kn = C[N×K] = dY_e[N×len] · X_e[len×K] (ldc N).
    let (dyo, xo) = (RowMajor { ptr: dy, p: n }, RowMajor { ptr: x, p: k });
    let (a, b, m, nn) = if kn { (dyo, xo, n, k) } else { (xo, dyo, k, n) };
    let sh = GemmShape {
        op_a: cb::cublasOperation_t::CUBLAS_OP_N,
        op_b: cb::cublasOperation_t::CUBLAS_OP_T,
        lda: a.p,
        ldb: b.p,
        ldc: m,
        out_bf16,
    };
    let calls: Vec<GemmCall> = live_segments(segs)
        .into_iter()
        .map(|(e, r0, len)| GemmCall {
            a: a.at(r0),
            b: b.at(r0),
            c: out + (e * per * esz) as u64,
            m,
            n: nn,
            k: len,
        })
        .collect();
    // SAFETY: expert e's calls read its rows of both operands and write its output block
    // (within them, by this function's contract).
    unsafe { issue(stream, &sh, &calls) }
}

/// forward/dgrad on bf16 operands (the portable build): `out[r][c] = Σ_j a[r][j] · b_e[c][j]`
/// for the rows `segs[e].0 .. segs[e].0 + segs[e].1` of expert e, with `a` `[rows][red]`,
/// `b` `[E][cols][red]` (or `[E][red][cols]` with `b_red_major`) and `out` `[rows][cols]`
/// (f32 or bf16), all row-major. Column-major, expert e's block is `C[cols×len] = B_e' ·
/// A_e` (B_e `red×cols` with ld red, op T; red-major: `cols×red` with ld cols, op N; A_e
/// `red×len`, ld red; ldc cols). Experts of one length at evenly spaced rows go out as
/// one strided batch, the rest one `cublasGemmEx` each; empty experts write nothing (they
/// own no rows).
///
/// # Safety
/// `a` addresses every row a segment names (`red` bf16 each), `b` `E·cols·red` bf16 and
/// `out` the segments' rows of `cols` outputs, all in the current context's device memory
/// and live until the enqueued work is done; `stream` is a valid stream of that context.
pub unsafe fn rows_bf16(
    stream: cu::CUstream,
    a: u64,
    (b, b_red_major): (u64, bool),
    segs: &[(usize, usize)],
    (cols, red): (usize, usize),
    out: u64,
    out_bf16: bool,
) -> PluginResult<()> {
    let esz = if out_bf16 { 2 } else { 4 };
    let (op_b, ldb) = if b_red_major {
        (cb::cublasOperation_t::CUBLAS_OP_N, cols)
    } else {
        (cb::cublasOperation_t::CUBLAS_OP_T, red)
    };
    let sh = GemmShape {
        op_a: op_b,
        op_b: cb::cublasOperation_t::CUBLAS_OP_N,
        lda: ldb,
        ldb: red,
        ldc: cols,
        out_bf16,
    };
    let (ao, bo) = (RowMajor { ptr: a, p: red }, RowMajor { ptr: b, p: red });
    let calls: Vec<GemmCall> = live_segments(segs)
        .into_iter()
        .map(|(e, r0, len)| GemmCall {
            a: bo.at(e * cols),
            b: ao.at(r0),
            c: out + (r0 * cols * esz) as u64,
            m: cols,
            n: len,
            k: red,
        })
        .collect();
    // SAFETY: expert e's call reads its weights and its rows of `a` and writes its rows of
    // `out` (within them, by this function's contract).
    unsafe { issue(stream, &sh, &calls) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The anchor shapes land where run 46 measured them faster: a and b on cuBLAS, c and d
    /// on the FP8 kernel; empty experts do not count; small dimensions keep FP8.
    #[test]
    fn bf16_rows_rule_matches_the_measured_shapes() {
        assert!(bf16_rows_faster(&[4096; 8], 4096, 4096)); // a forward and dgrad
        assert!(bf16_rows_faster(&[4096; 8], 8192, 2048)); // b forward
        assert!(bf16_rows_faster(&[4096; 8], 2048, 8192)); // b dgrad
        assert!(!bf16_rows_faster(&[1024; 32], 2880, 2880)); // c
        assert!(!bf16_rows_faster(&[256; 128], 768, 2048)); // d
        assert!(bf16_rows_faster(&[4096, 0, 4096, 0], 4096, 4096));
        assert!(!bf16_rows_faster(&[0, 0], 4096, 4096));
        assert!(!bf16_rows_faster(&[4096; 8], 1024, 4096));
        assert!(!bf16_rows_faster(&[4096; 8], 4096, 1024));
        assert!(!bf16_rows_faster(&[3000, 1000], 4096, 4096));
    }

    /// Equal calls with evenly advancing pointers batch (strides in elements: bf16 A/B,
    /// f32 or bf16 C); a different size, an uneven step or a single call do not.
    #[test]
    fn strided_batch_needs_one_size_and_even_steps() {
        let call = |i: u64| GemmCall {
            a: 0x1000 + i * 64,
            b: 0x9000 + i * 32,
            c: 0x20000 + i * 128,
            m: 8,
            n: 4,
            k: 16,
        };
        let calls: Vec<GemmCall> = (0..3).map(call).collect();
        assert_eq!(strided_batch(&calls, false), Some((32, 16, 32)));
        assert_eq!(strided_batch(&calls, true), Some((32, 16, 64)));
        assert_eq!(strided_batch(&calls[..1], false), None);
        assert_eq!(strided_batch(&[], false), None);
        let mut other = calls.clone();
        other[2].k = 8;
        assert_eq!(strided_batch(&other, false), None);
        let mut uneven = calls.clone();
        uneven[2].b += 2;
        assert_eq!(strided_batch(&uneven, false), None);
    }

    #[test]
    fn paths_parse_their_variable() {
        let p = |v| parse_path("MXHOST_MX_FWD_DGRAD", v);
        assert_eq!(p(Some("fp8")).unwrap(), GemmPath::Fp8);
        let err = p(Some("fast")).unwrap_err();
        assert!(
            err.message.contains("MXHOST_MX_FWD_DGRAD=\"fast\""),
            "{err:?}"
        );
        let auto = p(None).unwrap();
        assert_eq!(auto, p(Some(" auto ")).unwrap());
        assert_eq!(auto == GemmPath::Auto, cublas_present());
        assert_eq!(p(Some("bf16")).is_ok(), cublas_present());
    }
}
