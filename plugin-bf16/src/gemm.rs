//! BF16 operand preparation: every dense f32 operand element is rounded to the nearest
//! bf16 (ties to even, NaN stays NaN, overflow to ±Inf as IEEE rounding does); bf16
//! operands are widened exactly. The GEMM then multiplies these values with f32
//! accumulation, whatever the pass.

use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_common::dense::{round_to_bf16, DenseRef};
use mxhost_plugin_common::gemm::{OperandPrep, OperandRole};
use mxhost_plugin_common::host::HostOperand;
use rayon::prelude::*;
use std::borrow::Cow;

/// Operand preparation for BF16.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bf16Prep;

impl OperandPrep for Bf16Prep {
    fn prepare<'a>(
        &self,
        _role: &OperandRole<'_>,
        op: HostOperand<'a>,
    ) -> PluginResult<Cow<'a, [f32]>> {
        match op {
            HostOperand::Dense { data: DenseRef::F32(x), .. } => {
                Ok(Cow::Owned(x.par_iter().with_min_len(4096).map(|&v| round_to_bf16(v)).collect()))
            }
            HostOperand::Dense { data: DenseRef::Bf16(x), .. } => {
                Ok(Cow::Owned(x.par_iter().with_min_len(4096).map(|v| v.to_f32()).collect()))
            }
            HostOperand::Mx(_) => Err(PluginError::unsupported(
                "the bf16 plugin does not accept MX (pre-quantized) operands; pass dense f32/bf16 operands or select the mxfp8 plugin",
            )),
        }
    }
}
