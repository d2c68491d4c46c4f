//! Dense tensor operations on host tensors (the WIT `tensor-ops` interface), as plain
//! functions: activations, gradients and parameters stay in host memory.
//!
//! ```ignore
//! use mxhost_guest::ops;
//! let logits = ops::matmul_nt(&x, &w_router)?;          // x · Wrᵀ
//! let h = ops::act(&u, Activation::Silu)?;
//! let (loss, dy) = ops::mse_loss(&y, &target)?;
//! ```

use crate::bindings::mxhost::runtime::tensor_ops;
pub use crate::bindings::mxhost::runtime::tensor_ops::{Activation, AdamwConfig};
use crate::{Dtype, Error, Tensor};

type R<T> = Result<T, Error>;

/// `out[i, :] = x[index[i], :]`; index −1 gives a zero row (padding).
pub fn gather_rows(x: &Tensor, index: &[i32]) -> R<Tensor> {
    tensor_ops::gather_rows(x, index)
}
/// `out = zeros[rows, C]; out[index[i], :] += w[i] · x[i, :]` (w = 1 without weights);
/// index −1 rows are skipped.
pub fn scatter_add_rows(
    x: &Tensor,
    index: &[i32],
    weights: Option<&Tensor>,
    rows: u32,
) -> R<Tensor> {
    tensor_ops::scatter_add_rows(x, index, weights, rows)
}
/// `out[i, :] = w[i] · x[i, :]`.
pub fn scale_rows(x: &Tensor, w: &Tensor) -> R<Tensor> {
    tensor_ops::scale_rows(x, w)
}
/// `out[i] = Σ_j a[i, j] · b[i, j]`.
pub fn row_dot(a: &Tensor, b: &Tensor) -> R<Tensor> {
    tensor_ops::row_dot(a, b)
}
/// `act(x)` elementwise.
pub fn act(x: &Tensor, kind: Activation) -> R<Tensor> {
    tensor_ops::activation_forward(x, kind)
}
/// `dy · act'(x)`.
pub fn act_backward(x: &Tensor, dy: &Tensor, kind: Activation) -> R<Tensor> {
    tensor_ops::activation_backward(x, dy, kind)
}
/// `[a | b] → silu(a) · b` ([M, 2F] → [M, F]).
pub fn swiglu(x: &Tensor) -> R<Tensor> {
    tensor_ops::swiglu_forward(x)
}
/// Gradient of [`swiglu`] with respect to its input ([M, 2F]).
pub fn swiglu_backward(x: &Tensor, dy: &Tensor) -> R<Tensor> {
    tensor_ops::swiglu_backward(x, dy)
}
/// `alpha · a + beta · b`.
pub fn axpby(alpha: f32, a: &Tensor, beta: f32, b: &Tensor) -> R<Tensor> {
    tensor_ops::axpby(alpha, a, beta, b)
}
/// `a + b`.
pub fn add(a: &Tensor, b: &Tensor) -> R<Tensor> {
    axpby(1.0, a, 1.0, b)
}
/// `a − b`.
pub fn sub(a: &Tensor, b: &Tensor) -> R<Tensor> {
    axpby(1.0, a, -1.0, b)
}
/// `alpha · a` (computed as `alpha · a + 0 · a`, so NaN/Inf in `a` stay NaN).
pub fn scale(alpha: f32, a: &Tensor) -> R<Tensor> {
    axpby(alpha, a, 0.0, a)
}
/// `a ⊙ b`.
pub fn mul(a: &Tensor, b: &Tensor) -> R<Tensor> {
    tensor_ops::mul(a, b)
}
/// `op(a) · op(b)` in FP32 with optional transposes.
pub fn matmul_t(a: &Tensor, b: &Tensor, transpose_a: bool, transpose_b: bool) -> R<Tensor> {
    tensor_ops::matmul(a, b, transpose_a, transpose_b)
}
/// `a · b`: [M, K] · [K, N].
pub fn matmul(a: &Tensor, b: &Tensor) -> R<Tensor> {
    matmul_t(a, b, false, false)
}
/// `a · bᵀ`: [M, K] · [N, K]ᵀ (a linear layer with nn.Linear weights).
pub fn matmul_nt(a: &Tensor, b: &Tensor) -> R<Tensor> {
    matmul_t(a, b, false, true)
}
/// `aᵀ · b`: [K, M]ᵀ · [K, N] (a weight gradient).
pub fn matmul_tn(a: &Tensor, b: &Tensor) -> R<Tensor> {
    matmul_t(a, b, true, false)
}
/// Softmax over each row.
pub fn softmax_rows(x: &Tensor) -> R<Tensor> {
    tensor_ops::softmax_rows(x)
}
/// Convert between f32 and bf16 (round to nearest even).
pub fn cast(x: &Tensor, to: Dtype) -> R<Tensor> {
    tensor_ops::cast(x, to)
}
/// `Σ x` in f64.
pub fn sum(x: &Tensor) -> R<f64> {
    tensor_ops::sum(x)
}
/// `mean(x)` in f64.
pub fn mean(x: &Tensor) -> R<f64> {
    Ok(sum(x)? / x.numel().max(1) as f64)
}
/// `(mean((p − t)²), ∂/∂p)`.
pub fn mse_loss(prediction: &Tensor, target: &Tensor) -> R<(f64, Tensor)> {
    tensor_ops::mse_loss(prediction, target)
}
/// `param − lr · grad`.
pub fn sgd_step(param: &Tensor, grad: &Tensor, lr: f32) -> R<Tensor> {
    tensor_ops::sgd_step(param, grad, lr)
}
/// One AdamW step; returns (param, m, v).
pub fn adamw_step(
    param: &Tensor,
    grad: &Tensor,
    m: &Tensor,
    v: &Tensor,
    step: u32,
    config: AdamwConfig,
) -> R<(Tensor, Tensor, Tensor)> {
    tensor_ops::adamw_step(param, grad, m, v, step, config)
}
/// A copy of `x` (rows gathered in order).
pub fn copy(x: &Tensor) -> R<Tensor> {
    let index: Vec<i32> = (0..x.rows() as i32).collect();
    gather_rows(x, &index)
}
/// A 1-D f32 tensor from guest values.
pub fn vector(values: &[f32]) -> R<Tensor> {
    Tensor::from_f32(&[values.len() as u32], values)
}
