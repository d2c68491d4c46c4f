"""Grouped GEMM with sensible defaults, and MX quantize/dequantize.

Operands are `Dense(tensor)` (quantized inside the call by an MX plugin) or
`Quantized(mx_tensor)`; a bare `Tensor` or `MxTensor` is wrapped for you.
"""

from wit_world.imports import grouped_gemm as _gg
from wit_world.imports import mx as _mx
from wit_world.imports.grouped_gemm import GemmOptions, WeightLayout
from wit_world.imports.mx import MxTensor
from wit_world.imports.types import Dtype, ElementFormat, ScaleMode

_Dense = _gg.Operand_Dense
_Quantized = _gg.Operand_Quantized


def options(**overrides):
    """E4M3, rceil, 1×32 weights, [E, N, K] weights, f32 output, no extras.
    Keyword arguments override fields: `options(format=ElementFormat.E5M2)`."""
    o = GemmOptions(
        format=ElementFormat.E4M3,
        mode=ScaleMode.RCEIL,
        weight_blocks_2d=False,
        weight_layout=WeightLayout.NK,
        out_dtype=Dtype.F32,
        hadamard=False,
        dge=False,
        bias=False,
    )
    for k, v in overrides.items():
        if not hasattr(o, k):
            raise TypeError(f"gemm.options: no field {k!r}")
        setattr(o, k, v)
    return o


def with_options(o, **overrides):
    """A copy of `o` with some fields changed (Rust's `GemmOptions { x, ..o }`)."""
    n = GemmOptions(o.format, o.mode, o.weight_blocks_2d, o.weight_layout, o.out_dtype,
                    o.hadamard, o.dge, o.bias)
    for k, v in overrides.items():
        if not hasattr(n, k):
            raise TypeError(f"gemm.with_options: no field {k!r}")
        setattr(n, k, v)
    return n


def _op(v):
    if isinstance(v, (_Dense, _Quantized)):
        return v
    if isinstance(v, MxTensor):
        return _Quantized(v)
    return _Dense(v)


def forward(x, w, offs, o=None):
    """Y = X_e · W_eᵀ per expert. x: [rows, K]; w: [E, N, K] (or [E, K, N])."""
    return _gg.forward(_op(x), _op(w), offs, options() if o is None else o)


def dgrad(dy, w, offs, o=None):
    """dX = dY_e · W_e per expert. dy: [rows, N]."""
    return _gg.dgrad(_op(dy), _op(w), offs, options() if o is None else o)


def wgrad(dy, x, offs, o=None):
    """dW_e = dY_eᵀ · X_e per expert: [E, N, K]."""
    return _gg.wgrad(_op(dy), _op(x), offs, options() if o is None else o)


def quantize(x, spec):
    return _mx.quantize(x, spec)


def quantize_with_transpose(x, spec, for_gemm=False):
    """x quantized, plus the same MX tensor with its last two axes swapped (the
    quantization of x transposed) from one pass: for a weight [E, N, K], the forward copy
    and the dgrad copy [E, K, N] (pass it with weight layout kn). With `for_gemm` the plugin
    may also write its GEMM form of both (quantize-options.for-gemm)."""
    if for_gemm:
        o = _mx.QuantizeOptions(transposed=True, keep_values=False, for_gemm=True)
        return _mx.quantize_ext(x, spec, o)
    return _mx.quantize_with_transpose(x, spec)


def quantize_keep_values(x, spec):
    """x quantized with its exact MX values kept in bf16 beside the bytes (2 more bytes of
    device memory per element): GEMMs on the BF16 tensor cores read them instead of
    expanding the bytes; on CUDA, forward and dgrad with both operands kept run on cuBLAS
    alone. The products are the same MX values."""
    o = _mx.QuantizeOptions(transposed=False, keep_values=True, for_gemm=False)
    q, _ = _mx.quantize_ext(x, spec, o)
    return q


def quantize_for_gemm(x, spec):
    """x quantized to be a forward or dgrad operand: the plugin may write its GEMM form
    beside it in the same pass (quantize-options.for-gemm; mxfp8 on a Hopper GPU: the
    chained GEMM's, about 2 more bytes of device memory per element), and forward and dgrad
    on two such operands run faster. The MX tensor is quantize's."""
    o = _mx.QuantizeOptions(transposed=False, keep_values=False, for_gemm=True)
    q, _ = _mx.quantize_ext(x, spec, o)
    return q


def quantize_with_wgrad_values(x, spec, offs, transposed=False, keep_values=False,
                               for_gemm=False, weight=None):
    """x quantized (as `quantize`, or with the options of quantize-ext), plus x's wgrad
    values from the same pass where the plugin can: x [rows, C] quantized as wgrad
    quantizes a dense operand with these offsets, dequantized, in bf16. Returns
    (mx_tensor, transposed copy or None, values). Pass the values to `wgrad` with the same
    offsets and the spec's format and mode: they are multiplied as they are, so a training
    step reads X and dY once each. `weight`: the quantized weight x's forward (dgrad) reads
    (W [E, N, K] for X, its transposed copy for dY), when it is quantized already: the same
    results, and the plugin may write less beside x (quantize-with-wgrad-values-for)."""
    o = _mx.QuantizeOptions(transposed=transposed, keep_values=keep_values, for_gemm=for_gemm)
    if weight is not None:
        return _mx.quantize_with_wgrad_values_for(x, spec, o, offs, weight)
    return _mx.quantize_with_wgrad_values(x, spec, o, offs)


def dequantize(q):
    return _mx.dequantize(q)
