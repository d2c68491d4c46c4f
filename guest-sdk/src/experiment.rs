//! The ergonomic layer over the `experiment` world's imports: tensors, MX recipes,
//! grouped GEMM with default options, plugin switching and metrics.

pub use crate::bindings::mxhost::runtime::grouped_gemm::{GemmOptions, Operand, WeightLayout};
pub use crate::bindings::mxhost::runtime::mx::{MxTensor, QuantizeOptions};
pub use crate::bindings::mxhost::runtime::plugins::PluginInfo;
pub use crate::bindings::mxhost::runtime::routing_types::{RoutePlan, RouteRequest};
pub use crate::bindings::mxhost::runtime::tensors::Tensor;
pub use crate::bindings::mxhost::runtime::types::{
    BlockLayout, DeviceKind, Dtype, ElementFormat, Error, ErrorKind, MxSpec, ScaleMode,
};
pub use crate::bindings::Guest as Experiment;

use crate::bindings::mxhost::runtime::{grouped_gemm, metrics, mx, plugins, routing};

/// Everything a typical experiment uses.
pub mod prelude {
    pub use super::{
        gemm, metric, mx_spec, plugin, progress, Experiment, GemmOptions, MxSpec, MxTensor,
        Operand, Tensor, WeightLayout,
    };
    pub use super::{BlockLayout, Dtype, ElementFormat, ScaleMode};
    pub use crate::nn::{AdamW, ExpertActivation, GroupedLinear, MoeConfig, MoeLayer, Sgd};
    pub use crate::{ops, reference, topk};
}

/// The WIT name of an error kind (`invalid-argument`, ...), for messages.
pub fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidArgument => "invalid-argument",
        ErrorKind::Unsupported => "unsupported",
        ErrorKind::LimitExceeded => "limit-exceeded",
        ErrorKind::RejectedByGuard => "rejected-by-guard",
        ErrorKind::BackendFailure => "backend-failure",
        ErrorKind::BadHandle => "bad-handle",
    }
}

impl From<Error> for String {
    fn from(e: Error) -> String {
        format!("{}: {}", kind_name(e.kind), e.message)
    }
}

impl Tensor {
    /// Standard-normal f32 tensor drawn by the host from `seed`.
    pub fn randn_f32(shape: &[u32], seed: u64) -> Result<Tensor, Error> {
        Tensor::randn(shape, Dtype::F32, seed, 0.0, 1.0)
    }
    /// Row count of a 2-D tensor (first dimension).
    pub fn rows(&self) -> u32 {
        self.shape().first().copied().unwrap_or(0)
    }
}

/// An MX recipe: `mx_spec(ElementFormat::E4m3, BlockLayout::Along(1))` with rceil scales.
pub fn mx_spec(format: ElementFormat, block: BlockLayout) -> MxSpec {
    MxSpec {
        format,
        mode: ScaleMode::Rceil,
        block,
    }
}

/// Grouped GEMM with sensible defaults.
pub mod gemm {
    use super::*;

    /// E4M3, rceil, 1×32 weights, [E, N, K] weights, f32 output, no extras.
    pub fn options() -> GemmOptions {
        GemmOptions {
            format: ElementFormat::E4m3,
            mode: ScaleMode::Rceil,
            weight_blocks_2d: false,
            weight_layout: WeightLayout::Nk,
            out_dtype: Dtype::F32,
            hadamard: false,
            dge: false,
            bias: false,
        }
    }

    /// Y = X_e · W_eᵀ per expert.
    pub fn forward(
        x: Operand<'_>,
        w: Operand<'_>,
        offs: &[i32],
        o: &GemmOptions,
    ) -> Result<Tensor, Error> {
        grouped_gemm::forward(&x, &w, offs, *o)
    }
    /// dX = dY_e · W_e per expert.
    pub fn dgrad(
        dy: Operand<'_>,
        w: Operand<'_>,
        offs: &[i32],
        o: &GemmOptions,
    ) -> Result<Tensor, Error> {
        grouped_gemm::dgrad(&dy, &w, offs, *o)
    }
    /// dW_e = dY_eᵀ · X_e per expert.
    pub fn wgrad(
        dy: Operand<'_>,
        x: Operand<'_>,
        offs: &[i32],
        o: &GemmOptions,
    ) -> Result<Tensor, Error> {
        grouped_gemm::wgrad(&dy, &x, offs, *o)
    }
    pub fn quantize(x: &Tensor, spec: MxSpec) -> Result<MxTensor, Error> {
        mx::quantize(x, spec)
    }
    /// `x` quantized, plus the same MX tensor with its last two axes swapped (the
    /// quantization of xᵀ) from one pass: for a weight, the forward copy `[E, N, K]`
    /// and the dgrad copy `[E, K, N]` (pass it with `WeightLayout::Kn`).
    pub fn quantize_with_transpose(
        x: &Tensor,
        spec: MxSpec,
    ) -> Result<(MxTensor, MxTensor), Error> {
        mx::quantize_with_transpose(x, spec)
    }
    /// `x` quantized with the exact MX values kept beside the bytes (2 more bytes of
    /// device memory per element): GEMMs on the BF16 tensor cores skip their expansion
    /// pass; with both operands kept, forward and dgrad on CUDA run on cuBLAS alone.
    pub fn quantize_keep_values(x: &Tensor, spec: MxSpec) -> Result<MxTensor, Error> {
        let options = QuantizeOptions {
            transposed: false,
            keep_values: true,
            for_gemm: false,
        };
        mx::quantize_ext(x, spec, options).map(|(q, _)| q)
    }
    /// `x` quantized to be a forward or dgrad operand (X, dY): the plugin may write its GEMM
    /// form beside it in the same pass (`for_gemm`; mxfp8 on a Hopper GPU: the chained
    /// GEMM's, about 2 more bytes of device memory per element), and forward and dgrad on two
    /// such operands run faster. The MX tensor is `quantize`'s. Worth it for large GEMMs
    /// (guest-sdk's `GroupedLinear` asks from `nn::CHAINED_MIN_MACS` multiply-adds).
    pub fn quantize_for_gemm(x: &Tensor, spec: MxSpec) -> Result<MxTensor, Error> {
        let options = QuantizeOptions {
            transposed: false,
            keep_values: false,
            for_gemm: true,
        };
        mx::quantize_ext(x, spec, options).map(|(q, _)| q)
    }
    /// `quantize_with_transpose` for a GEMM (see [`quantize_for_gemm`]): a weight's forward
    /// copy and dgrad copy, each with the plugin's GEMM form.
    pub fn quantize_with_transpose_for_gemm(
        x: &Tensor,
        spec: MxSpec,
    ) -> Result<(MxTensor, MxTensor), Error> {
        let options = QuantizeOptions {
            transposed: true,
            keep_values: false,
            for_gemm: true,
        };
        let (q, t) = mx::quantize_ext(x, spec, options)?;
        let t = t.ok_or_else(|| Error {
            kind: ErrorKind::BackendFailure,
            message: "quantize-ext gave no transposed copy".into(),
        })?;
        Ok((q, t))
    }
    /// `quantize`/`quantize_with_transpose` with explicit options; the second result is
    /// the transposed copy when `options.transposed`.
    pub fn quantize_ext(
        x: &Tensor,
        spec: MxSpec,
        options: QuantizeOptions,
    ) -> Result<(MxTensor, Option<MxTensor>), Error> {
        mx::quantize_ext(x, spec, options)
    }
    /// `quantize_ext`, plus `x`'s wgrad values (`[rows, C]` in bf16: `x` quantized as
    /// wgrad quantizes a dense operand with these offsets, and dequantized) from the same
    /// pass where the plugin can. Pass the third result to `wgrad` as
    /// `Operand::Dense` with the same offsets, format and mode: it is multiplied as it is,
    /// so a training step reads X (or dY) once for both of its quantizations.
    pub fn quantize_with_wgrad_values(
        x: &Tensor,
        spec: MxSpec,
        options: QuantizeOptions,
        offs: &[i32],
    ) -> Result<(MxTensor, Option<MxTensor>, Tensor), Error> {
        mx::quantize_with_wgrad_values(x, spec, options, offs)
    }
    /// `quantize_with_wgrad_values` for X (or dY) whose forward (dgrad) weight is quantized
    /// already: `weight` is that GEMM's weight as it reads it (W `[E, N, K]` for X, the
    /// transposed copy for dY). The same results; the plugin may write less beside `x` (mxfp8
    /// on a Hopper GPU: only the part of its GEMM form that a GEMM with this weight reads).
    pub fn quantize_with_wgrad_values_for(
        x: &Tensor,
        spec: MxSpec,
        options: QuantizeOptions,
        offs: &[i32],
        weight: &MxTensor,
    ) -> Result<(MxTensor, Option<MxTensor>, Tensor), Error> {
        mx::quantize_with_wgrad_values_for(x, spec, options, offs, weight)
    }
    pub fn dequantize(q: &MxTensor) -> Result<Tensor, Error> {
        mx::dequantize(q)
    }
}

/// Plugin selection.
pub mod plugin {
    use super::*;
    pub fn list() -> Vec<PluginInfo> {
        plugins::list()
    }
    pub fn active() -> String {
        plugins::active()
    }
    pub fn select(name: &str) -> Result<(), Error> {
        plugins::select(name)
    }
}

/// Record one point of a metric series (written to metrics.csv by the host).
pub fn metric(name: &str, step: u64, value: f64) {
    metrics::record(name, step, value)
}

/// Report progress of a long phase (rendered as a progress bar by the host).
pub fn progress(done: u64, total: u64, label: &str) {
    metrics::progress(done, total, label)
}

/// Log a line through the host.
pub fn log(message: &str) {
    metrics::log(metrics::Level::Info, message)
}

/// Route a batch with the host's router (a `--router` guest or the built-in top-k).
pub fn route(request: &RouteRequest) -> Result<RoutePlan, String> {
    routing::route(request)
}
