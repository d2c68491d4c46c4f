//! The rows with values kept (ABI 1.2): quantize keeping the bf16 values, the GEMMs and
//! training steps that read them (run by `bench_shape` after its other rows).

#[cfg(doc)]
use super::rows::bench_shape;
use super::timing::{push_gemm_row, push_timed_row, PushRow, Timing};
use super::Shape;
use crate::device::Device;
use crate::error::OpResult;
use crate::ops::{self, GemmConfig, GemmOperand};
use crate::plugin::LoadedPlugin;
use crate::tensor::{MxTensor, Tensor};
use mxhost_plugin_abi::{BlockLayout, GemmPass, MxFormat, ScaleMode};

/// `t` quantized as every bench row quantizes (E4M3, rceil) in `block`, with its values kept
/// (ABI 1.2).
pub(super) fn quantize_kept(
    plugin: &LoadedPlugin,
    t: &Tensor,
    block: BlockLayout,
) -> OpResult<MxTensor> {
    let keep = ops::QuantizeExtras {
        transposed: false,
        keep_values: true,
        for_gemm: false,
    };
    ops::quantize_with(plugin, t, MxFormat::E4m3, ScaleMode::Rceil, block, keep).map(|r| r.0)
}

/// Rows with the quantizers keeping the exact MX values in bf16 beside the bytes (ABI
/// 1.2, `ops::QuantizeExtras::keep_values`): the quantize passes that write them, the
/// GEMMs that then run on the BF16 tensor cores without an expansion pass, and the two
/// training steps built on them. Measured after every other row of the shape (see the
/// note on positions in [`bench_shape`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn bench_kept_values(
    plugin: &LoadedPlugin,
    (device, timing): (Device, Timing),
    s: Shape,
    (x, w, dy): (&Tensor, &Tensor, &Tensor),
    cfg: &GemmConfig,
    push: &mut PushRow<'_>,
) -> anyhow::Result<()> {
    use GemmOperand::{Dense, Mx};
    let rows = s.e * s.m;
    let offs: Vec<i32> = (1..=s.e).map(|i| (i * s.m) as i32).collect();
    let qv = |t: &Tensor, block: BlockLayout| quantize_kept(plugin, t, block);
    // The weight needs no transposed copy here: dgrad reads its values ([E, N, K]) as
    // cuBLAS's transposed operand.
    let qwv = |w: &Tensor| qv(w, BlockLayout::tile());
    let gemm = |pass, a: GemmOperand<'_>, b: GemmOperand<'_>, c: &GemmConfig| {
        ops::grouped_gemm(plugin, pass, a, b, &offs, c).map(drop)
    };
    let (xb, wb) = ((rows * s.k) as f64, (s.e * s.n * s.k) as f64);
    push_timed_row(
        (device, timing),
        push,
        ("quantize X 1x32, values kept (bf16→e4m3 + bf16)", "-"),
        &mut || qv(x, BlockLayout::vector(1)).map(drop),
        (None, xb * 2.0 + xb + xb / 32.0 + 2.0 * xb),
    )?;
    push_timed_row(
        (device, timing),
        push,
        ("quantize W 32x32, values kept (no transposed copy)", "-"),
        &mut || qwv(w).map(drop),
        (None, wb * 2.0 + wb + wb / 1024.0 + 2.0 * wb),
    )?;
    let flops = 2.0 * (rows * s.n * s.k) as f64;
    let gemm_bytes = |a: u64, b: u64, o: u64| 2.0 * (a + b) as f64 + 2.0 * o as f64;
    let mut gemm_row = |label: &str, pass: &str, f: &mut dyn FnMut() -> OpResult<()>, fb| {
        push_gemm_row((device, timing), push, (label, pass), f, fb)
    };
    let (qx, qw, qdy) = (
        qv(x, BlockLayout::vector(1))?,
        qwv(w)?,
        qv(dy, BlockLayout::vector(1))?,
    );
    gemm_row(
        "forward X 1x32 · W 32x32, values kept (pre-quantized)",
        "forward",
        &mut || gemm(GemmPass::Forward, Mx(&qx), Mx(&qw), cfg),
        (flops, gemm_bytes(rows * s.k, s.e * s.n * s.k, rows * s.n)),
    )?;
    gemm_row(
        "dgrad dY 1x32 · W 32x32 [E,N,K], values kept (pre-quantized)",
        "dgrad",
        &mut || gemm(GemmPass::Dgrad, Mx(&qdy), Mx(&qw), cfg),
        (flops, gemm_bytes(rows * s.n, s.e * s.n * s.k, rows * s.k)),
    )?;
    drop((qx, qw, qdy));
    // The default recipe's step as the quantizers keep values: forward and dgrad on
    // cuBLAS from the kept values, wgrad from dense X and dY (1×32 along M in the call).
    let step = || -> OpResult<()> {
        let qx = qv(x, BlockLayout::vector(1))?;
        let qw = qwv(w)?;
        let qdy = qv(dy, BlockLayout::vector(1))?;
        gemm(GemmPass::Forward, Mx(&qx), Mx(&qw), cfg)?;
        gemm(GemmPass::Dgrad, Mx(&qdy), Mx(&qw), cfg)?;
        gemm(GemmPass::Wgrad, Dense(dy), Dense(x), cfg)
    };
    gemm_row(
        "training step, values kept (default recipe)",
        "step",
        &mut { step },
        (3.0 * flops, 0.0),
    )?;
    // X and dY in 32×32 tiles with values kept: each tensor's values serve both GEMMs
    // that read it, wgrad included.
    let step_tiles = || -> OpResult<()> {
        let qx = qv(x, BlockLayout::tile())?;
        let qw = qwv(w)?;
        let qdy = qv(dy, BlockLayout::tile())?;
        gemm(GemmPass::Forward, Mx(&qx), Mx(&qw), cfg)?;
        gemm(GemmPass::Dgrad, Mx(&qdy), Mx(&qw), cfg)?;
        gemm(GemmPass::Wgrad, Mx(&qdy), Mx(&qx), cfg)
    };
    gemm_row(
        "training step, X and dY in 32x32 tiles, values kept",
        "step",
        &mut { step_tiles },
        (3.0 * flops, 0.0),
    )?;
    // Rows added in run 73 (after the steps, which keep run 71's positions).
    // wgrad from kept values (1×32 along M, X also in 32×32 tiles): cuBLAS alone. The
    // quantizations along M are not timed here (the in-call row above times its own).
    let (kdy_m, kx_m, kx_tile) = (
        qv(dy, BlockLayout::vector(0))?,
        qv(x, BlockLayout::vector(0))?,
        qv(x, BlockLayout::tile())?,
    );
    let wgrad_bytes = gemm_bytes(rows * s.n, rows * s.k, s.e * s.n * s.k);
    // (The FP8 kernel, MXHOST_MX_WGRAD=fp8, does not take 32×32 X: say so, go on.)
    for (label, xq) in [
        (
            "wgrad dY 1x32 on M · X 1x32 on M, values kept (pre-quantized)",
            &kx_m,
        ),
        (
            "wgrad dY 1x32 on M · X 32x32, values kept (pre-quantized)",
            &kx_tile,
        ),
    ] {
        let mut f = || gemm(GemmPass::Wgrad, Mx(&kdy_m), Mx(xq), cfg);
        if let Err(e) = gemm_row(label, "wgrad", &mut f, (flops, wgrad_bytes)) {
            eprintln!("mxhost bench: {label} skipped: {e:#}");
        }
    }
    drop((kdy_m, kx_m, kx_tile));
    // As guest-sdk's GroupedLinear ran a step on a GPU before ABI 1.5 (and still does with
    // a plugin older than that): only the weight quantized here (values kept, once), X and
    // dY dense and quantized in each call. (Its step today: the last row of the shape.)
    let qw = qwv(w)?;
    gemm_row(
        "forward X bf16 (quantized in the call) · W 32x32, W's values kept",
        "forward",
        &mut || gemm(GemmPass::Forward, Dense(x), Mx(&qw), cfg),
        (flops, gemm_bytes(rows * s.k, s.e * s.n * s.k, rows * s.n)),
    )?;
    drop(qw);
    // The same step with keep_values(false): every operand dense, quantized in each call
    // (measured first: a later row reads slower, so this order favours it).
    // (`cfg` quantizes dense weights in 32×32 tiles.)
    let step_dense = || -> OpResult<()> {
        gemm(GemmPass::Forward, Dense(x), Dense(w), cfg)?;
        gemm(GemmPass::Wgrad, Dense(dy), Dense(x), cfg)?;
        gemm(GemmPass::Dgrad, Dense(dy), Dense(w), cfg)
    };
    gemm_row(
        "training step as GroupedLinear with keep_values(false): all operands quantized in the calls",
        "step",
        &mut { step_dense },
        (3.0 * flops, 0.0),
    )?;
    let step_linear = || -> OpResult<()> {
        let qw = qwv(w)?;
        gemm(GemmPass::Forward, Dense(x), Mx(&qw), cfg)?;
        gemm(GemmPass::Wgrad, Dense(dy), Dense(x), cfg)?;
        gemm(GemmPass::Dgrad, Dense(dy), Mx(&qw), cfg)
    };
    gemm_row(
        "training step, W's values kept, X and dY quantized in the calls",
        "step",
        &mut { step_linear },
        (3.0 * flops, 0.0),
    )
}
