//! MXFP8 grouped GEMM on the CPU: operands become the exact f32 values an MX GEMM
//! multiplies, then the shared driver (`mxhost_plugin_common::gemm`) computes with f32
//! accumulation.
//!
//! - An **Mx** operand is dequantized as it is, whatever its valid block layout.
//! - A **Dense** operand is quantized with `options.format`/`options.mode` in the
//!   canonical layout of its role and dequantized again: forward/dgrad A along its last
//!   axis; weights along the pass's reduction axis (forward K, dgrad N) or in 32×32
//!   tiles when `weight_blocks_2d`; wgrad dY and X along M, **per expert** — each
//!   expert's rows are quantized as their own matrix, so blocks restart at its first
//!   row, its last block covers its tail, and no scale mixes two experts.

use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_abi::{BlockLayout, MxFormat, ScaleMode};
use mxhost_plugin_common::dense::DenseRef;
use mxhost_plugin_common::gemm::{OperandPrep, OperandRole};
use mxhost_plugin_common::host::HostOperand;
use std::borrow::Cow;

use crate::numerics::{dequantize_mx, fake_quantize, fake_quantize_row_segments};

/// Operand preparation for MXFP8.
#[derive(Debug, Clone)]
pub struct MxPrep {
    /// Format and mode for dense operands. Kept as results so a request whose operands
    /// are all pre-quantized does not depend on them.
    pub format: PluginResult<MxFormat>,
    pub mode: PluginResult<ScaleMode>,
    pub weight_blocks_2d: bool,
}

impl MxPrep {
    pub fn new(format: MxFormat, mode: ScaleMode, weight_blocks_2d: bool) -> Self {
        MxPrep {
            format: Ok(format),
            mode: Ok(mode),
            weight_blocks_2d,
        }
    }
}

fn fake_quantize_dense(
    data: DenseRef<'_>,
    shape: &[u64],
    layout: BlockLayout,
    format: MxFormat,
    mode: ScaleMode,
) -> PluginResult<Vec<f32>> {
    match data {
        DenseRef::F32(x) => fake_quantize(x, shape, layout, format, mode),
        DenseRef::Bf16(x) => fake_quantize(x, shape, layout, format, mode),
    }
}

impl OperandPrep for MxPrep {
    fn prepare<'a>(
        &self,
        role: &OperandRole<'_>,
        op: HostOperand<'a>,
    ) -> PluginResult<Cow<'a, [f32]>> {
        let (data, shape) = match op {
            HostOperand::Mx(m) => {
                let mut out = vec![0f32; m.data.len()];
                dequantize_mx(m.data, m.scales, m.shape, m.block, m.format, &mut out)?;
                return Ok(Cow::Owned(out));
            }
            HostOperand::Dense { data, shape } => (data, shape),
        };
        let format = self.format.clone()?;
        let mode = self.mode.clone()?;
        let rank = shape.len() as u32;
        let values = match *role {
            OperandRole::Activations => {
                fake_quantize_dense(data, shape, BlockLayout::vector(rank - 1), format, mode)?
            }
            OperandRole::Weights { reduction_axis } => {
                let layout = if self.weight_blocks_2d {
                    BlockLayout::tile()
                } else {
                    BlockLayout::vector(reduction_axis as u32)
                };
                fake_quantize_dense(data, shape, layout, format, mode)?
            }
            // Already the values this quantization gives (ABI 1.5, `DenseMxValues`): used
            // as they are, which equals quantizing them again, at no cost.
            OperandRole::GroupedRows { on_grid: true, .. } => data.to_f32_vec(),
            OperandRole::GroupedRows { groups, .. } => {
                grouped_rows(data, shape, groups, format, mode)?
            }
        };
        Ok(Cow::Owned(values))
    }
}

/// Quantize each group's rows of a `[rows, P]` operand along M as its own matrix.
/// Padding rows (after the last group) are left zero: the GEMM never reads them.
fn grouped_rows(
    data: DenseRef<'_>,
    shape: &[u64],
    groups: &[std::ops::Range<usize>],
    format: MxFormat,
    mode: ScaleMode,
) -> PluginResult<Vec<f32>> {
    let p = shape.get(1).copied().unwrap_or(0) as usize;
    let mut out = vec![0f32; data.len()];
    if p == 0 {
        return Ok(out);
    }
    let fm = (format, mode);
    match data {
        DenseRef::F32(x) => fake_quantize_row_segments(x, p, groups, fm, &mut out)?,
        DenseRef::Bf16(x) => fake_quantize_row_segments(x, p, groups, fm, &mut out)?,
    }
    Ok(out)
}
