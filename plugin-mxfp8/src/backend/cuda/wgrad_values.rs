//! The wgrad values a quantize call writes beside its MX tensor (ABI 1.5,
//! `QuantizeDesc::wgrad_values`): the input fake-quantized 1×32 along M with each expert's
//! blocks from its first row, in bf16, which wgrad then multiplies as they are
//! (`DenseMxValues`, [`super::bf16_path::wgrad_via_bf16`]). The point is one read of X
//! (or dY) for both of its quantizations: where every expert starts on a multiple of 32
//! rows the blocks are the aligned 32-row blocks a kernel sees, and the quantizer that
//! writes the MX tensor writes them in the same pass (`mx_quantize_rows_form_wv_*` under
//! `MXHOST_MX_CHAIN`, `mx_quantize_rows_wv_bf16_*` otherwise, and with the row blocks' kept
//! values too `mx_quantize_rows_vals_wv_bf16_*`). Anything else (experts that start
//! elsewhere, f32 input, a transposed copy in the same call) gets `mx_fakequant_m32_*` after
//! the quantizer: the same values, a second read.
//! `MXHOST_MX_WGRAD_VALUES_FUSED=0` forces that second pass, for A/B timing.

use super::device::Call;
use super::quantize::QuantJob;
use super::{arg, cdiv, i32_of, ptr, GRID_YZ_MAX};
use crate::kernels::Unit;
use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_abi::DType;
use mxhost_plugin_common::args::{Blocking, QuantizeArgs, TensorArg, WgradValues};
use std::ops::Range;
use std::sync::OnceLock;

fn fusion_enabled() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| super::env_flag("MXHOST_MX_WGRAD_VALUES_FUSED", true))
}

/// Where a fused quantizer may write the wgrad values of `args`: their address when asked
/// for, the blocks are aligned (every offset a multiple of 32) and the input is bf16
/// `[rows, C]` with `C % 32 == 0` and 16-byte aligned buffers; else `None`.
pub(super) fn fusable(args: &QuantizeArgs) -> Option<u64> {
    let w = args.wgrad_values.as_ref()?;
    let x = &args.input;
    let ok = fusion_enabled()
        && w.aligned()
        && x.dtype == DType::Bf16
        && x.shape.len() == 2
        && x.shape[1].is_multiple_of(32)
        && ptr(x).is_multiple_of(16)
        && ptr(&w.out).is_multiple_of(16)
        && i32::try_from(x.shape[0]).is_ok();
    ok.then(|| ptr(&w.out))
}

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

/// `MxQuantRowsWvParams` of cuda/include/mx_quant_rows_wv.cuh (natural C layout).
#[repr(C)]
#[derive(Clone, Copy)]
struct QuantRowsWvParams {
    inp: u64,
    q: u64,
    s: u64,
    wv: u64,
    r: i32,
    c: i32,
    mode: i32,
}

/// `MxQuantRowsValsWvParams` of cuda/include/mx_quant_rows_wv.cuh (natural C layout).
#[repr(C)]
#[derive(Clone, Copy)]
struct QuantRowsValsWvParams {
    p: QuantRowsWvParams,
    vals: u64,
}

/// The 32-row blocks of `segments`, as `mx_fakequant_m32` reads them: (first row, rows)
/// pairs, each segment's blocks from its first row, its last one covering its tail.
fn block_table(segments: &[Range<usize>]) -> PluginResult<Vec<i32>> {
    let mut blocks = Vec::new();
    for g in segments {
        for r0 in g.clone().step_by(32) {
            blocks.push(i32_of("rows", r0)?);
            blocks.push((g.end - r0).min(32) as i32);
        }
    }
    Ok(blocks)
}

/// A block table on the device, uploaded on the call's stream.
pub(super) struct DeviceBlocks {
    pub(super) table: u64,
    pub(super) count: usize,
}

impl DeviceBlocks {
    /// The table of `segments` (nothing allocated when it is empty).
    pub(super) fn upload(call: &mut Call, segments: &[Range<usize>]) -> PluginResult<Self> {
        let blocks = block_table(segments)?;
        if blocks.is_empty() {
            return Ok(DeviceBlocks { table: 0, count: 0 });
        }
        let table = call.alloc(blocks.len() * 4)?;
        // SAFETY: `table` holds the copied i32s (this call's scratch).
        unsafe { call.upload(table, &blocks) }?;
        Ok(DeviceBlocks {
            table,
            count: blocks.len() / 2,
        })
    }
}

/// `mx_fakequant_m32_*`: `x` (`[rows][p]`, f32 or bf16) fake-quantized in the blocks of
/// `blocks` into `out` (bf16, same shape; rows outside every block not written).
pub(super) fn fakequant_m32(
    call: &mut Call,
    x: &TensorArg,
    out: u64,
    blocks: &DeviceBlocks,
    (rows, p): (usize, usize),
    (fmt, mode): (u8, i32),
) -> PluginResult<()> {
    if blocks.count == 0 || p == 0 {
        return Ok(());
    }
    let prm = FakeQuantParams {
        inp: ptr(x),
        out,
        blocks: blocks.table,
        r: i32_of("rows", rows)?,
        c: i32_of("cols", p)?,
        mode,
        nblocks: i32_of("blocks", blocks.count)?,
    };
    let name = format!(
        "mx_fakequant_m32_{}_{}",
        if x.dtype == DType::Bf16 {
            "bf16"
        } else {
            "f32"
        },
        if fmt == 0 { "e4m3" } else { "e5m2" }
    );
    let grid = (cdiv(p, 128), blocks.count.min(GRID_YZ_MAX), 1);
    call.launch(
        Unit::Quantize,
        &name,
        grid,
        (128, 1, 1),
        0,
        &mut [arg(&prm)],
    )
}

/// The wgrad values of `args` by their own pass over the input (after the quantizer).
pub(super) fn write_separately(
    call: &mut Call,
    args: &QuantizeArgs,
    w: &WgradValues,
) -> PluginResult<()> {
    let x = &args.input;
    let (rows, c) = (x.shape[0] as usize, x.shape[1] as usize);
    let blocks = DeviceBlocks::upload(call, &w.segments(rows))?;
    let o = &args.output;
    let fm = (super::fmt_code(o.format), super::mode_code(o.mode));
    fakequant_m32(call, x, ptr(&w.out), &blocks, (rows, c), fm)
}

/// `mx_quantize_rows_wv_bf16_*` for a 1×32-along-rows quantization without a transposed
/// copy: the MX tensor and the wgrad values at `wv` in one pass, and with kept values
/// (`mx_quantize_rows_vals_wv_bf16_*`) those too. Returns whether it ran (the request and
/// the buffers fit the kernel).
pub(super) fn quantize_rows_fused(
    call: &mut Call,
    args: &QuantizeArgs,
    job: &QuantJob,
    wv: u64,
) -> PluginResult<bool> {
    let (x, o) = (&args.input, &args.output);
    let fits = matches!(job.block, Blocking::Vector { axis: 1 })
        && job.rank == 2
        && args.transposed.is_none()
        && args
            .values
            .as_ref()
            .is_none_or(|v| ptr(v).is_multiple_of(16))
        && ptr(&o.data).is_multiple_of(16);
    if !fits {
        return Ok(false);
    }
    let (rows, c) = (x.shape[0] as usize, x.shape[1] as usize);
    let p = QuantRowsWvParams {
        inp: ptr(x),
        q: ptr(&o.data),
        s: ptr(&o.scales),
        wv,
        r: i32_of("rows", rows)?,
        c: i32_of("cols", c)?,
        mode: job.mode,
    };
    let fmt = if job.fmt == 0 { "e4m3" } else { "e5m2" };
    let grid = (cdiv(c, 128), cdiv(rows, 32).min(GRID_YZ_MAX), 1);
    match &args.values {
        None => {
            let name = format!("mx_quantize_rows_wv_bf16_{fmt}");
            call.launch(Unit::Quantize, &name, grid, (128, 1, 1), 0, &mut [arg(&p)])?
        }
        Some(v) => {
            let name = format!("mx_quantize_rows_vals_wv_bf16_{fmt}");
            let pv = QuantRowsValsWvParams { p, vals: ptr(v) };
            call.launch(Unit::Quantize, &name, grid, (128, 1, 1), 0, &mut [arg(&pv)])?
        }
    }
    Ok(true)
}
