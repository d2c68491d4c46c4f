//! wgrad on the dequantize-to-BF16 path: each operand becomes its exact MX values in bf16
//! (`[rows][P]`, 1×32 blocks along M restarting at each expert) and cuBLAS multiplies
//! them per expert with FP32 accumulation.
//!
//! A dense operand is fake-quantized in the call (`mx_fakequant_m32_*`, memory-bound), and
//! cuBLAS cannot start an expert before its values exist. So the experts go in *pieces*
//! ([`expert_pieces`]): the fake quantization of every piece is enqueued at once on the
//! device's side stream, and cuBLAS multiplies piece j on the call's stream as soon as
//! piece j's values are written, while the side stream writes the next pieces' values.
//! Only the first piece's conversion is exposed. `MXHOST_MX_WGRAD_PIECES=1` keeps
//! everything on the call's stream in one piece (docs/perf.md run 131 times both).

use super::bf16_path::dequantize_into;
use super::cublas;
use super::device::Call;
use super::gemm::gemm_trace;
use super::{arg, cdiv, fmt_code, i32_of, mode_code, ptr, GRID_YZ_MAX};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{DType, WeightLayout};
use mxhost_plugin_common::args::{GemmArgs, OperandArg, TensorArg};
use mxhost_plugin_common::cuda::drv;
use std::ops::Range;
use std::sync::OnceLock;

use cudarc::driver::result as cr;

/// `MxFakeQuantParams` of cuda/include/mx_fakequant.cuh (natural C layout).
#[repr(C)]
#[derive(Clone, Copy)]
struct FakeQuantParams {
    inp: u64,
    out: u64,
    blocks: u64,
    r: i32,
    c: i32,
    mode: i32,
    nblocks: i32,
}

/// How many pieces wgrad's experts are cut into when an operand is fake-quantized in the
/// call (`MXHOST_MX_WGRAD_PIECES`, 1 to 64; default 4). Read once per process.
fn wgrad_pieces() -> PluginResult<usize> {
    static P: OnceLock<PluginResult<usize>> = OnceLock::new();
    P.get_or_init(|| parse_pieces(std::env::var("MXHOST_MX_WGRAD_PIECES").ok().as_deref()))
        .clone()
}

fn parse_pieces(v: Option<&str>) -> PluginResult<usize> {
    match v.map(str::trim) {
        None | Some("") => Ok(4),
        Some(s) => match s.parse::<usize>() {
            Ok(n @ 1..=64) => Ok(n),
            _ => Err(PluginError::invalid(format!(
                "MXHOST_MX_WGRAD_PIECES={s:?}: expected a whole number from 1 to 64"
            ))),
        },
    }
}

/// One piece of the experts: the experts it holds and their 32-row blocks (indices into
/// the call's block table, expert-major).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Piece {
    experts: Range<usize>,
    blocks: Range<usize>,
}

/// The experts (row ranges, in order) cut into at most `n` runs of consecutive experts
/// holding about equal numbers of rows. Piece j ends at the first live expert whose end
/// reaches (j + 1)/n of all rows, so an empty expert goes with the next live one, and only
/// the last piece can hold no rows (empty experts at the end, or none live at all).
fn expert_pieces(groups: &[Range<usize>], n: usize) -> Vec<Piece> {
    let total: usize = groups.iter().map(|g| g.len()).sum();
    let mut pieces = Vec::new();
    let (mut e0, mut b0, mut b, mut rows) = (0, 0, 0, 0);
    for (e, g) in groups.iter().enumerate() {
        rows += g.len();
        b += cdiv(g.len(), 32);
        let last = e + 1 == groups.len();
        // Close the piece once its rows reach the next share (not before an empty tail:
        // the last piece takes whatever follows).
        if last || (!g.is_empty() && rows * n >= total * (pieces.len() + 1) && pieces.len() + 1 < n)
        {
            pieces.push(Piece {
                experts: e0..e + 1,
                blocks: b0..b,
            });
            (e0, b0) = (e + 1, b);
        }
    }
    pieces
}

/// What an operand needs before cuBLAS can read it as bf16 `[rows][P]`.
enum Values {
    /// Its values are at this address (kept by the quantizer, or dequantized just now).
    Ready(u64),
    /// A dense operand: `mx_fakequant_m32_*` writes them to `out`, piece by piece.
    Fake {
        inp: u64,
        out: u64,
        cols: usize,
        kernel: String,
    },
}

impl Values {
    fn ptr(&self) -> u64 {
        match self {
            Values::Ready(p) => *p,
            Values::Fake { out, .. } => *out,
        }
    }
}

/// Allocates what `op` needs and converts a pre-quantized operand (any block layout, e.g.
/// X in 32×32 tiles) on the call's stream; a dense one is left to [`fake_quantize`].
fn prepare(
    call: &mut Call,
    op: &OperandArg,
    rows: usize,
    cols: usize,
    fmt: u8,
) -> PluginResult<Values> {
    let t: &TensorArg = match op {
        // Pre-quantized with its values kept ([rows][P]): read as they are.
        OperandArg::Mx(m) => {
            if let Some(v) = m.values.as_ref().filter(|v| !v.swapped) {
                return Ok(Values::Ready(ptr(&v.t)));
            }
            let out = call.alloc(rows * cols * 2)?;
            dequantize_into(call, m, out, true)?;
            return Ok(Values::Ready(out));
        }
        OperandArg::Dense(t) => t,
    };
    let kernel = format!(
        "mx_fakequant_m32_{}_{}",
        if t.dtype == DType::Bf16 {
            "bf16"
        } else {
            "f32"
        },
        if fmt == 0 { "e4m3" } else { "e5m2" }
    );
    Ok(Values::Fake {
        inp: ptr(t),
        out: call.alloc(rows * cols * 2)?,
        cols,
        kernel,
    })
}

/// Enqueues the fake quantization of `v`'s blocks `blocks` (of the table at `tbl`) on
/// `stream`; nothing for an operand that is ready.
fn fake_quantize(
    call: &Call,
    stream: cudarc::driver::sys::CUstream,
    v: &Values,
    (tbl, blocks): (u64, Range<usize>),
    (rows, mode): (usize, i32),
) -> PluginResult<()> {
    let Values::Fake {
        inp,
        out,
        cols,
        kernel,
    } = v
    else {
        return Ok(());
    };
    let nblocks = blocks.len();
    let prm = FakeQuantParams {
        inp: *inp,
        out: *out,
        blocks: tbl + 8 * blocks.start as u64,
        r: i32_of("rows", rows)?,
        c: i32_of("cols", *cols)?,
        mode,
        nblocks: i32_of("blocks", nblocks)?,
    };
    call.launch_on(
        stream,
        Unit::Quantize,
        kernel,
        (
            (cdiv(*cols, 128), nblocks.min(GRID_YZ_MAX), 1),
            (128, 1, 1),
            0,
        ),
        &mut [arg(&prm)],
    )
}

/// wgrad on the dequantize-to-BF16 path: out_e = dY_eᵀ · X_e from the operands' MX values
/// in bf16 — a dense operand fake-quantized along M (1×32 blocks restarting at each expert,
/// bit-identical to quantize-then-dequantize), a pre-quantized one dequantized or read from
/// its kept values — multiplied in place by cuBLAS: no transposed or padded copy.
pub(super) fn wgrad_via_bf16(
    call: &mut Call,
    args: &GemmArgs,
    groups: &[Range<usize>],
    out_bf16: bool,
) -> PluginResult<()> {
    let (n, k, rows) = (args.n, args.k, args.rows);
    let fmt = fmt_code(args.format()?);
    let mode = mode_code(args.mode()?);
    // (row0, nrows) of every 32-row block of every expert, expert-major.
    let mut blocks: Vec<i32> = Vec::new();
    for g in groups {
        for r0 in g.clone().step_by(32) {
            blocks.push(i32_of("rows", r0)?);
            blocks.push((g.end - r0).min(32) as i32);
        }
    }
    let nblocks = blocks.len() / 2;
    let segs: Vec<(usize, usize)> = groups.iter().map(|g| (g.start, g.len())).collect();
    let (dy, x) = if nblocks > 0 {
        (
            prepare(call, &args.a, rows, n, fmt)?,
            prepare(call, &args.b, rows, k, fmt)?,
        )
    } else {
        // Every expert empty (no block): no operand is read, the output is zeroed.
        (Values::Ready(0), Values::Ready(0))
    };
    let fakes = [&dy, &x].iter().any(|v| matches!(v, Values::Fake { .. }));
    let tbl = if fakes {
        let tbl = call.alloc(blocks.len() * 4)?;
        // SAFETY: `tbl` holds the copied i32s; pageable copies are staged.
        unsafe { cr::memcpy_htod_async(tbl, &blocks, call.stream) }
            .map_err(drv("cuMemcpyHtoDAsync"))?;
        tbl
    } else {
        0
    };
    let pieces = if fakes {
        expert_pieces(groups, wgrad_pieces()?)
    } else {
        vec![Piece {
            experts: 0..groups.len(),
            blocks: 0..nblocks,
        }]
    };
    // The fake quantization runs on the side stream when there is more than one piece, after
    // everything this call enqueued so far (the operands' allocation, the block table).
    let side = if pieces.len() > 1 {
        let s = call.side_stream()?;
        call.order(call.stream, s)?;
        Some(s)
    } else {
        None
    };
    if gemm_trace() {
        eprintln!(
            "mxhost-mxfp8: wgrad E={} N={n} K={k}: MX values as bf16 (dense operands fake-quantized along M{}, pre-quantized ones dequantized) + cuBLAS (MXHOST_MX_WGRAD=fp8 for the FP8 kernel)",
            groups.len(),
            if side.is_some() {
                format!(" in {} pieces beside cuBLAS", pieces.len())
            } else {
                String::new()
            }
        );
    }
    let esz = if out_bf16 { 2 } else { 4 };
    for piece in &pieces {
        for v in [&dy, &x] {
            let stream = side.unwrap_or(call.stream);
            fake_quantize(call, stream, v, (tbl, piece.blocks.clone()), (rows, mode))?;
        }
        if let Some(s) = side {
            call.order(s, call.stream)?;
        }
        let e0 = piece.experts.start;
        // SAFETY: dy/x hold rows·N and rows·K bf16 values (allocated above on this stream,
        // this piece's blocks written before this point in its order; rows outside every
        // block are never read) or are unused (no live expert); the segments are the
        // piece's experts' rows, within `rows`; expert e0's output block starts at
        // e0·N·K elements of the host's [E][·][·] buffer.
        unsafe {
            cublas::wgrad_bf16(
                call.stream,
                dy.ptr(),
                x.ptr(),
                &segs[piece.experts.clone()],
                (n, k),
                args.weight_layout == WeightLayout::Kn,
                ptr(&args.out) + (e0 * n * k * esz) as u64,
                out_bf16,
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(lens: &[usize]) -> Vec<Range<usize>> {
        let mut r0 = 0;
        lens.iter()
            .map(|&m| {
                r0 += m;
                r0 - m..r0
            })
            .collect()
    }

    /// Pieces cover every expert and block once, in order, never more than asked.
    fn check_cover(lens: &[usize], n: usize) -> Vec<Piece> {
        let g = groups(lens);
        let p = expert_pieces(&g, n);
        assert!(!p.is_empty() && p.len() <= n.max(1), "{lens:?} {n}: {p:?}");
        let nblocks: usize = lens.iter().map(|&m| m.div_ceil(32)).sum();
        assert_eq!(p[0].experts.start, 0);
        assert_eq!(p[0].blocks.start, 0);
        assert_eq!(p.last().unwrap().experts.end, lens.len());
        assert_eq!(p.last().unwrap().blocks.end, nblocks);
        for w in p.windows(2) {
            assert_eq!(w[0].experts.end, w[1].experts.start);
            assert_eq!(w[0].blocks.end, w[1].blocks.start);
        }
        for q in &p {
            let b: usize = lens[q.experts.clone()]
                .iter()
                .map(|&m| m.div_ceil(32))
                .sum();
            assert_eq!(b, q.blocks.len(), "{lens:?}: {q:?}");
        }
        p
    }

    #[test]
    fn equal_experts_split_evenly() {
        let p = check_cover(&[4096; 8], 4);
        let sizes: Vec<usize> = p.iter().map(|q| q.experts.len()).collect();
        assert_eq!(sizes, [2, 2, 2, 2]);
        assert_eq!(p[1].blocks, 256..512);
        let p = check_cover(&[1024; 32], 8);
        assert!(p.iter().all(|q| q.experts.len() == 4));
        // More pieces than experts: one expert each.
        assert_eq!(check_cover(&[100, 200], 4).len(), 2);
        assert_eq!(check_cover(&[4096; 8], 1).len(), 1);
    }

    #[test]
    fn uneven_and_empty_experts_stay_covered() {
        for lens in [
            &[0, 0, 512, 0, 384, 640, 0][..],
            &[0, 0, 0],
            &[1, 0, 4095, 33, 0],
            &[5000, 1, 1, 1],
            &[0],
        ] {
            for n in 1..=9 {
                let p = check_cover(lens, n);
                // No piece but the last ends on an empty expert's rows alone.
                for q in &p[..p.len() - 1] {
                    assert!(
                        lens[q.experts.clone()].iter().sum::<usize>() > 0,
                        "{lens:?} {n}: {p:?}"
                    );
                }
            }
        }
        // One huge expert first: the rest share the remaining pieces.
        let p = check_cover(&[5000, 1, 1, 1], 4);
        assert_eq!(p[0].experts, 0..1);
    }

    #[test]
    fn pieces_variable_parses_or_says_why() {
        assert_eq!(parse_pieces(None).unwrap(), 4);
        assert_eq!(parse_pieces(Some(" 8 ")).unwrap(), 8);
        assert_eq!(parse_pieces(Some("1")).unwrap(), 1);
        for bad in ["0", "65", "two", "-1"] {
            let e = parse_pieces(Some(bad)).unwrap_err();
            assert!(e.to_string().contains("MXHOST_MX_WGRAD_PIECES"), "{e}");
        }
    }
}
