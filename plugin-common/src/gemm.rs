//! The CPU grouped-GEMM driver shared by every plugin.
//!
//! A plugin supplies only [`OperandPrep`]: how a host operand becomes the f32 matrix
//! the GEMM multiplies (MXFP8 quantize-then-dequantize, BF16 rounding, ...). Everything
//! else is precision-independent and lives here: which operand plays which role in each
//! pass, the weight layouts (`[E,N,K]` / `[E,K,N]`, handled with strides rather than
//! transposed copies), the expert loop, zeroed padding rows, empty experts, and the
//! f32 → bf16 (RNE) output conversion. Products accumulate in f32 (`matrixmultiply`'s
//! `sgemm`), which is what the GPU kernels do too.
//!
//! Parallelism: forward/dgrad split the output into fixed row chunks (a chunk that
//! straddles an expert boundary runs one sgemm per expert segment); wgrad splits each
//! expert's output matrix into row chunks. Every output element is written exactly once,
//! so the host's buffer need not be initialised.

use crate::args::GemmArgs;
use crate::dense::DenseMut;
use crate::host::{self, HostOperand};
use half::bf16;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{GemmPass, WeightLayout};
use rayon::prelude::*;
use std::borrow::Cow;
use std::ops::Range;

/// Output rows per parallel task (forward/dgrad) and output-matrix rows per task (wgrad):
/// large enough for sgemm to reach its packed-kernel speed, small enough to feed cores.
const ROW_CHUNK: usize = 64;

/// What an operand is used for, so a plugin can prepare it in the right layout (e.g.
/// quantize along the reduction axis).
#[derive(Debug, Clone, Copy)]
pub enum OperandRole<'g> {
    /// Forward/dgrad A: `[rows, P]`, reduced along its last axis (K forward, N dgrad).
    Activations,
    /// Forward/dgrad weights `[E, d1, d2]`, reduced along `reduction_axis` (1 or 2):
    /// forward reduces K (axis 2 for `Nk`, 1 for `Kn`), dgrad reduces N.
    Weights { reduction_axis: usize },
    /// Wgrad dY or X: `[rows, P]`, reduced along axis 0 (M) within each group's rows;
    /// rows outside every group (padding) are never read by the GEMM. `on_grid`: the
    /// operand came as `DenseMxValues` (ABI 1.5), its values already quantized so.
    GroupedRows {
        groups: &'g [Range<usize>],
        on_grid: bool,
    },
}

/// How a plugin turns a host operand into the f32 values the GEMM multiplies. The
/// result has the operand's shape, row-major.
pub trait OperandPrep: Sync {
    fn prepare<'a>(
        &self,
        role: &OperandRole<'_>,
        op: HostOperand<'a>,
    ) -> PluginResult<Cow<'a, [f32]>>;
}

/// The roles of A and B in `pass`; `on_grid` as in [`run_marked`].
pub fn roles(
    pass: GemmPass,
    layout: WeightLayout,
    groups: &[Range<usize>],
    on_grid: [bool; 2],
) -> (OperandRole<'_>, OperandRole<'_>) {
    match pass {
        GemmPass::Forward => {
            let axis = match layout {
                WeightLayout::Nk => 2,
                WeightLayout::Kn => 1,
            };
            (
                OperandRole::Activations,
                OperandRole::Weights {
                    reduction_axis: axis,
                },
            )
        }
        GemmPass::Dgrad => {
            let axis = match layout {
                WeightLayout::Nk => 1,
                WeightLayout::Kn => 2,
            };
            (
                OperandRole::Activations,
                OperandRole::Weights {
                    reduction_axis: axis,
                },
            )
        }
        GemmPass::Wgrad => (
            OperandRole::GroupedRows {
                groups,
                on_grid: on_grid[0],
            },
            OperandRole::GroupedRows {
                groups,
                on_grid: on_grid[1],
            },
        ),
    }
}

/// Run a validated request whose tensors are in host memory.
///
/// # Safety
/// Every buffer of `args` satisfies [`host::slice`]'s precondition (host memory the
/// host allocated at its full size; the output exclusively ours for the call).
pub unsafe fn run_on_host(args: &GemmArgs, prep: &dyn OperandPrep) -> PluginResult<()> {
    let groups = args.groups();
    // SAFETY: forwarded precondition.
    let (a, b, out) = unsafe {
        (
            host::operand(&args.a)?,
            host::operand(&args.b)?,
            host::dense_mut(&args.out)?,
        )
    };
    let problem = GroupedGemm {
        pass: args.pass,
        weight_layout: args.weight_layout,
        groups: &groups,
        rows: args.rows,
        n: args.n,
        k: args.k,
    };
    run_marked(&problem, (a, b), out, prep, args.dense_on_grid)
}

/// Prepare both operands with `prep` (in their roles for `g.pass`) and compute.
pub fn run(
    g: &GroupedGemm<'_>,
    a: HostOperand<'_>,
    b: HostOperand<'_>,
    out: DenseMut<'_>,
    prep: &dyn OperandPrep,
) -> PluginResult<()> {
    run_marked(g, (a, b), out, prep, [false, false])
}

/// [`run`], with `on_grid` saying which dense operand came as `DenseMxValues`.
pub fn run_marked(
    g: &GroupedGemm<'_>,
    (a, b): (HostOperand<'_>, HostOperand<'_>),
    out: DenseMut<'_>,
    prep: &dyn OperandPrep,
    on_grid: [bool; 2],
) -> PluginResult<()> {
    let (role_a, role_b) = roles(g.pass, g.weight_layout, g.groups, on_grid);
    let (a, b) = rayon::join(|| prep.prepare(&role_a, a), || prep.prepare(&role_b, b));
    grouped_gemm_f32(g, &a?, &b?, out)
}

/// One grouped GEMM pass on f32 operands (see `GemmPass` for the shapes).
#[derive(Debug, Clone, Copy)]
pub struct GroupedGemm<'g> {
    pub pass: GemmPass,
    pub weight_layout: WeightLayout,
    /// Row range of each expert; contiguous from row 0, sorted. Rows after the last
    /// range are padding.
    pub groups: &'g [Range<usize>],
    pub rows: usize,
    pub n: usize,
    pub k: usize,
}

impl GroupedGemm<'_> {
    fn experts(&self) -> usize {
        self.groups.len()
    }
    fn check(&self, a: &[f32], b: &[f32], out: usize) -> PluginResult<()> {
        let (e, rows, n, k) = (self.experts(), self.rows, self.n, self.k);
        let mut start = 0;
        for g in self.groups {
            if g.start != start || g.end < g.start || g.end > rows {
                return Err(PluginError::invalid(
                    "groups must be contiguous from row 0 and within rows",
                ));
            }
            start = g.end;
        }
        let prod = |dims: &[usize]| dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let sizes = match self.pass {
            GemmPass::Forward => (prod(&[rows, k]), prod(&[e, n, k]), prod(&[rows, n])),
            GemmPass::Dgrad => (prod(&[rows, n]), prod(&[e, n, k]), prod(&[rows, k])),
            GemmPass::Wgrad => (prod(&[rows, n]), prod(&[rows, k]), prod(&[e, n, k])),
        };
        let (Some(la), Some(lb), Some(lo)) = sizes else {
            return Err(PluginError::invalid("problem size overflows usize"));
        };
        if a.len() != la || b.len() != lb || out != lo {
            return Err(PluginError::invalid(format!(
                "operand sizes ({}, {}, out {}) do not match the problem ({la}, {lb}, out {lo})",
                a.len(),
                b.len(),
                out
            )));
        }
        Ok(())
    }
}

/// Compute one pass: forward `out[rows,N] = A·W_eᵀ`, dgrad `out[rows,K] = dY·W_e`,
/// wgrad `out_e = dY_eᵀ·X_e` (`[N,K]`) or `X_eᵀ·dY_e` (`[K,N]`). Padding rows of a
/// forward/dgrad output are zero; an empty expert's wgrad output is zero.
pub fn grouped_gemm_f32(
    g: &GroupedGemm<'_>,
    a: &[f32],
    b: &[f32],
    out: DenseMut<'_>,
) -> PluginResult<()> {
    g.check(a, b, out.len())?;
    match g.pass {
        GemmPass::Forward | GemmPass::Dgrad => rows_pass(g, a, b, out),
        GemmPass::Wgrad => wgrad_pass(g, a, b, out),
    }
    Ok(())
}

/// Split `out` into pieces of `outer` elements and those into chunks of `inner`
/// elements, and let `f(piece, chunk_index, chunk)` fill each chunk with f32 values
/// (through a scratch buffer when the output is bf16).
fn for_each_chunk<F>(out: DenseMut<'_>, outer: usize, inner: usize, f: F)
where
    F: Fn(usize, usize, &mut [f32]) + Sync,
{
    if out.is_empty() || outer == 0 || inner == 0 {
        return;
    }
    match out {
        DenseMut::F32(o) => o.par_chunks_mut(outer).enumerate().for_each(|(p, piece)| {
            piece
                .par_chunks_mut(inner)
                .enumerate()
                .for_each(|(i, chunk)| f(p, i, chunk))
        }),
        DenseMut::Bf16(o) => o.par_chunks_mut(outer).enumerate().for_each(|(p, piece)| {
            piece
                .par_chunks_mut(inner)
                .enumerate()
                .for_each(|(i, chunk)| {
                    let mut scratch = vec![0f32; chunk.len()];
                    f(p, i, &mut scratch);
                    for (d, s) in chunk.iter_mut().zip(&scratch) {
                        *d = bf16::from_f32(*s);
                    }
                })
        }),
    }
}

/// `c[m×n] = a[m×k] · b[k×n]` with arbitrary element strides for `a` and `b` and a
/// contiguous row-major `c`; f32 accumulation. `c` need not be initialised.
///
/// # Safety
/// `a` is valid for every `a[i*rsa + l*csa]` (i < m, l < k) and `b` for every
/// `b[l*rsb + j*csb]` (l < k, j < n); `c.len() == m*n`.
#[allow(clippy::too_many_arguments)]
unsafe fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: *const f32,
    rsa: usize,
    csa: usize,
    b: *const f32,
    rsb: usize,
    csb: usize,
    c: &mut [f32],
) {
    debug_assert_eq!(c.len(), m * n);
    if k == 0 {
        // An empty sum; also avoids relying on how sgemm treats beta = 0 when k = 0.
        c.fill(0.0);
        return;
    }
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: the ranges are valid by this function's precondition; beta = 0 means c is
    // written without being read. Strides fit in isize: they are bounded by the lengths
    // of slices, which are ≤ isize::MAX.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a,
            rsa as isize,
            csa as isize,
            b,
            rsb as isize,
            csb as isize,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        )
    }
}

/// Forward and dgrad: `out[r, :] = a[r, :] · B_e` for the expert `e` owning row `r`,
/// zero for padding rows. `a` is `[rows, p]`, `out` `[rows, q]`, and `B_e[i][j]` is the
/// weight element `e·N·K + i·rsb + j·csb`.
fn rows_pass(g: &GroupedGemm<'_>, a: &[f32], w: &[f32], out: DenseMut<'_>) {
    let (n, k) = (g.n, g.k);
    let (p, q) = match g.pass {
        GemmPass::Forward => (k, n),
        _ => (n, k),
    };
    let (rsb, csb) = match (g.pass, g.weight_layout) {
        // forward, W_e [N,K]: B[kk][nn] = W_e[nn][kk]
        (GemmPass::Forward, WeightLayout::Nk) => (1, k),
        // forward, W_e stored [K,N]: B = the stored matrix
        (GemmPass::Forward, WeightLayout::Kn) => (n, 1),
        // dgrad, W_e [N,K]: B = W_e
        (_, WeightLayout::Nk) => (k, 1),
        // dgrad, W_e stored [K,N]: B[nn][kk] = S[kk][nn]
        (_, WeightLayout::Kn) => (1, n),
    };
    let used_rows = g.groups.last().map_or(0, |r| r.end);
    let total = out.len();
    for_each_chunk(out, total, ROW_CHUNK * q, |_, ci, chunk| {
        let r0 = ci * ROW_CHUNK;
        let r1 = r0 + chunk.len() / q;
        let first = g.groups.partition_point(|rg| rg.end <= r0);
        for (e, rg) in g.groups.iter().enumerate().skip(first) {
            if rg.start >= r1 {
                break;
            }
            let (s, t) = (rg.start.max(r0), rg.end.min(r1));
            if s >= t {
                continue;
            }
            let c = &mut chunk[(s - r0) * q..(t - r0) * q];
            // SAFETY: rows s..t of `a` ([rows, p]) and expert e's n·k weights are in
            // bounds (lengths checked in `GroupedGemm::check`); the strides address
            // exactly the p×q elements of B_e.
            unsafe {
                sgemm(
                    t - s,
                    p,
                    q,
                    a[s * p..].as_ptr(),
                    p,
                    1,
                    w[e * n * k..].as_ptr(),
                    rsb,
                    csb,
                    c,
                )
            };
        }
        let pad = used_rows.clamp(r0, r1);
        chunk[(pad - r0) * q..].fill(0.0);
    });
}

/// Wgrad: `out_e[i][j] = Σ_{m in expert e} L[m][i] · R[m][j]` with `out_e` `[p, q]`:
/// `Nk` stores `dY_eᵀ·X_e` (L = dY, R = X), `Kn` stores `X_eᵀ·dY_e`.
fn wgrad_pass(g: &GroupedGemm<'_>, dy: &[f32], x: &[f32], out: DenseMut<'_>) {
    let (l, r, p, q) = match g.weight_layout {
        WeightLayout::Nk => (dy, x, g.n, g.k),
        WeightLayout::Kn => (x, dy, g.k, g.n),
    };
    for_each_chunk(out, p * q, ROW_CHUNK * q, |e, ci, chunk| {
        let rg = &g.groups[e];
        let i0 = ci * ROW_CHUNK;
        let m = chunk.len() / q;
        if rg.is_empty() {
            chunk.fill(0.0);
            return;
        }
        // SAFETY: L rows rg (each p wide, columns i0..i0+m) and R rows rg (q wide) are in
        // bounds (rg.end ≤ rows; lengths checked in `GroupedGemm::check`).
        unsafe {
            sgemm(
                m,
                rg.len(),
                q,
                l[rg.start * p + i0..].as_ptr(),
                1,
                p,
                r[rg.start * q..].as_ptr(),
                q,
                1,
                chunk,
            )
        };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(
        pass: GemmPass,
        groups: &[Range<usize>],
        rows: usize,
        n: usize,
        k: usize,
    ) -> GroupedGemm<'_> {
        GroupedGemm {
            pass,
            weight_layout: WeightLayout::Nk,
            groups,
            rows,
            n,
            k,
        }
    }

    #[test]
    fn an_empty_reduction_writes_zeros() {
        let groups = [0..3, 3..5];
        // forward with K = 0: out [rows, N] is all zeros (the sum over nothing).
        let mut out = vec![f32::NAN; 6 * 4];
        grouped_gemm_f32(
            &problem(GemmPass::Forward, &groups, 6, 4, 0),
            &[],
            &[],
            DenseMut::F32(&mut out),
        )
        .unwrap();
        assert!(out.iter().all(|&v| v == 0.0));
        // wgrad with only empty experts: zeros.
        let groups = [0..0, 0..0];
        let mut out = vec![f32::NAN; 2 * 3 * 2];
        let (dy, x) = (vec![1.0; 4 * 3], vec![1.0; 4 * 2]);
        grouped_gemm_f32(
            &problem(GemmPass::Wgrad, &groups, 4, 3, 2),
            &dy,
            &x,
            DenseMut::F32(&mut out),
        )
        .unwrap();
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one expert's row range
    fn empty_outputs_are_fine() {
        let groups = [0..2];
        grouped_gemm_f32(
            &problem(GemmPass::Forward, &groups, 2, 0, 3),
            &[1.0; 6],
            &[],
            DenseMut::F32(&mut []),
        )
        .unwrap();
        grouped_gemm_f32(
            &problem(GemmPass::Dgrad, &groups, 2, 3, 0),
            &[1.0; 6],
            &[],
            DenseMut::F32(&mut []),
        )
        .unwrap();
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one expert's row range
    fn inconsistent_sizes_are_errors() {
        let groups = [0..2, 1..3];
        let err = grouped_gemm_f32(
            &problem(GemmPass::Forward, &groups, 3, 1, 1),
            &[0.0; 3],
            &[0.0; 2],
            DenseMut::F32(&mut [0.0; 3]),
        );
        assert!(err.is_err(), "overlapping groups");
        let groups = [0..2];
        let err = grouped_gemm_f32(
            &problem(GemmPass::Forward, &groups, 2, 2, 2),
            &[0.0; 3],
            &[0.0; 4],
            DenseMut::F32(&mut [0.0; 4]),
        );
        assert!(err.is_err(), "short A");
        let err = grouped_gemm_f32(
            &problem(GemmPass::Forward, &groups, usize::MAX, 2, 2),
            &[],
            &[],
            DenseMut::F32(&mut []),
        );
        assert!(err.is_err(), "overflow");
    }

    #[test]
    fn a_tiny_forward_by_hand() {
        // Two experts, one row each, plus a padding row; W_e [N=2, K=2].
        let groups = [0..1, 1..2];
        let a = [1.0, 2.0, 3.0, 4.0, 9.0, 9.0];
        let w = [1.0, 0.0, 0.0, 1.0, /* e1 */ 1.0, 1.0, 2.0, 0.0];
        let mut out = [f32::NAN; 6];
        grouped_gemm_f32(
            &problem(GemmPass::Forward, &groups, 3, 2, 2),
            &a,
            &w,
            DenseMut::F32(&mut out),
        )
        .unwrap();
        assert_eq!(out, [1.0, 2.0, 7.0, 6.0, 0.0, 0.0]);
    }
}
