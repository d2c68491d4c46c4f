"""Dense tensor operations on host tensors (the WIT `tensor-ops` interface), as plain
functions: activations, gradients and parameters stay in host memory.

    logits = ops.matmul_nt(x, w_router)          # x · Wrᵀ
    h = ops.act(u, Activation.SILU)
    loss, dy = ops.mse_loss(y, target)
"""

from wit_world.imports import tensor_ops as _t
from wit_world.imports.tensor_ops import Activation, AdamwConfig  # noqa: F401
from wit_world.imports.tensors import Tensor


def gather_rows(x, index):
    """out[i, :] = x[index[i], :]; index -1 gives a zero row (padding)."""
    return _t.gather_rows(x, index)


def scatter_add_rows(x, index, weights, rows):
    """out = zeros[rows, C]; out[index[i], :] += w[i] · x[i, :] (w = 1 when weights is None)."""
    return _t.scatter_add_rows(x, index, weights, rows)


def scale_rows(x, w):
    """out[i, :] = w[i] · x[i, :]."""
    return _t.scale_rows(x, w)


def row_dot(a, b):
    """out[i] = Σ_j a[i, j] · b[i, j]."""
    return _t.row_dot(a, b)


def act(x, kind):
    """act(x) elementwise."""
    return _t.activation_forward(x, kind)


def act_backward(x, dy, kind):
    """dy · act'(x)."""
    return _t.activation_backward(x, dy, kind)


def swiglu(x):
    """[a | b] → silu(a) · b ([M, 2F] → [M, F])."""
    return _t.swiglu_forward(x)


def swiglu_backward(x, dy):
    """Gradient of `swiglu` with respect to its input ([M, 2F])."""
    return _t.swiglu_backward(x, dy)


def axpby(alpha, a, beta, b):
    """alpha · a + beta · b."""
    return _t.axpby(alpha, a, beta, b)


def add(a, b):
    return axpby(1.0, a, 1.0, b)


def sub(a, b):
    return axpby(1.0, a, -1.0, b)


def scale(alpha, a):
    """alpha · a (computed as alpha · a + 0 · a, so NaN/Inf in a stay NaN)."""
    return axpby(alpha, a, 0.0, a)


def mul(a, b):
    return _t.mul(a, b)


def matmul_t(a, b, transpose_a, transpose_b):
    """op(a) · op(b) in FP32 with optional transposes."""
    return _t.matmul(a, b, transpose_a, transpose_b)


def matmul(a, b):
    """a · b: [M, K] · [K, N]."""
    return matmul_t(a, b, False, False)


def matmul_nt(a, b):
    """a · bᵀ: [M, K] · [N, K]ᵀ (a linear layer with nn.Linear weights)."""
    return matmul_t(a, b, False, True)


def matmul_tn(a, b):
    """aᵀ · b: [K, M]ᵀ · [K, N] (a weight gradient)."""
    return matmul_t(a, b, True, False)


def softmax_rows(x):
    return _t.softmax_rows(x)


def cast(x, to):
    """Convert between f32 and bf16 (round to nearest even)."""
    return _t.cast(x, to)


def sum(x):  # noqa: A001 - mirrors ops::sum
    """Σ x in f64."""
    return _t.sum(x)


def mean(x):
    return sum(x) / max(x.numel(), 1)


def mse_loss(prediction, target):
    """(mean((p − t)²), ∂/∂p)."""
    return _t.mse_loss(prediction, target)


def sgd_step(param, grad, lr):
    """param − lr · grad."""
    return _t.sgd_step(param, grad, lr)


def adamw_step(param, grad, m, v, step, config):
    """One AdamW step; returns (param, m, v)."""
    return _t.adamw_step(param, grad, m, v, step, config)


def copy(x):
    """A copy of x (rows gathered in order)."""
    return gather_rows(x, [*range(x.rows())])


def vector(values):
    """A 1-D f32 tensor from guest values."""
    values = values if isinstance(values, list) else [*values]
    return Tensor.from_f32([len(values)], values)
