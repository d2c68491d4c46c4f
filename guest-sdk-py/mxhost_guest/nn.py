"""Building blocks for MoE training in a guest, mirroring the Rust SDK's
`mxhost_guest::nn` call for call: `GroupedLinear` (per-expert linear layers on the
contiguous grouped GEMM), `MoeLayer` (router, dispatch, experts, combine, with a full
backward pass) and the optimizers `Sgd` and `AdamW`.

Precision follows the active plugin: the GEMMs pass dense operands that an MX plugin
quantizes inside the call, so `plugin.select("bf16")` turns the same model into the
BF16 baseline.

    moe = MoeLayer(MoeConfig(experts=8, hidden=256, ffn=512, top_k=2), seed)
    opt = AdamW(2e-3)
    for step in range(steps):
        y = moe.forward(x)
        loss, dy = ops.mse_loss(y, target)
        moe.backward(dy)
        opt.step(moe.parameters())
"""

import enum
import math

from componentize_py_types import Err
from wit_world.imports import routing as _routing
from wit_world.imports.routing_types import RouteRequest
from wit_world.imports.tensors import Tensor
from wit_world.imports.types import (
    BlockLayout_Along as Along, BlockLayout_Tile32x32, DeviceKind, Dtype, ErrorKind, MxSpec,
)

from . import gemm, ops, plugin, topk
from ._f32 import f32
from .ops import Activation, AdamwConfig

_U64 = (1 << 64) - 1


def _inv_sqrt_f32(n):
    # Rust: 1.0 / (n as f32).sqrt(), all in f32.
    return f32(1.0 / f32(math.sqrt(f32(float(n)))))


class RoutingError(ValueError):
    """The router refused a batch (the Rust SDK's invalid-argument `routing failed: …`)."""


class Param:
    """A parameter and its gradient, as an optimizer sees them: `owner.attr` is the
    value (replaced by the optimizer), `grad` the gradient or None."""

    __slots__ = ("owner", "attr", "grad")

    def __init__(self, owner, attr, grad):
        self.owner, self.attr, self.grad = owner, attr, grad

    @property
    def value(self):
        return getattr(self.owner, self.attr)

    @value.setter
    def value(self, v):
        setattr(self.owner, self.attr, v)


# Multiply-adds per GEMM (rows × K × N) from which GroupedLinear gives a chained GEMM the
# weight's transposed copy (as the Rust SDK's nn::CHAINED_MIN_MACS; docs/perf.md run 156).
CHAINED_MIN_MACS = 1 << 35


class GroupedLinear:
    """Per-expert linear layers y_e = x_e · W_eᵀ on the contiguous grouped GEMM.

    `weight` is [E, N, K] f32 (nn.Linear layout per expert); `grad` the ∂L/∂W of the
    last backward pass; `options` the GEMM options (dense operands are quantized in the
    call by MX plugins and ignored by bf16). `keep_values` (default on): on a GPU with a
    quantizing plugin, forward quantizes the weight once with the in-call recipe and its
    exact values kept in bf16, and forward and dgrad both read that copy (as the Rust
    SDK's GroupedLinear; the same MX values, so the same model). There x and dy are
    quantized here too, each with its wgrad values from the same pass (plugin ABI 1.5):
    forward (dgrad) reads the MX tensor and wgrad the values, and backward keeps x's values
    instead of x. With 32×32 weight blocks, a plugin that reports "chained-gemm" (mxfp8 on
    a Hopper GPU, unless MXHOST_MX_CHAIN=off) and a GEMM of at least CHAINED_MIN_MACS
    multiply-adds, the weight is quantized with its transposed copy instead of its values
    (dgrad reads [E, K, N] with weight layout kn), and weight, x and dy for a GEMM
    (for_gemm), as the chained GEMM wants.
    """

    def __init__(self, experts, in_features, out_features, seed, weight=None):
        if weight is None:
            weight = Tensor.randn([experts, out_features, in_features], Dtype.F32,
                                  seed & _U64, 0.0, _inv_sqrt_f32(in_features))
        self.weight = weight
        self.grad = None
        self.options = gemm.options()
        self.keep_values = True
        self._saved = None

    @classmethod
    def from_weight(cls, weight):
        """Wrap existing [E, N, K] weights."""
        return cls(0, 0, 0, 0, weight=weight)

    def weight_blocks_2d(self, on):
        """Quantize weights with 32×32 tiles (one copy serves forward and dgrad)."""
        self.options.weight_blocks_2d = bool(on)
        return self

    def _weight_kept(self, rows):
        """The weight's quantization for forward, for dgrad, and dgrad's weight layout, or
        None (kept values off, the weight not on a GPU, a plugin that does not quantize or
        cannot keep values): then the weight goes dense into each call. Values kept, or with
        32×32 tiles under a "chained-gemm" plugin and a forward of `rows` rows with at least
        CHAINED_MIN_MACS multiply-adds, the tiles and their transposed copy."""
        active = plugin.active()
        info = next((p for p in plugin.list() if p.name == active), None)
        if not (self.keep_values and self.weight.device() == DeviceKind.CUDA
                and info is not None and "quantize" in info.capabilities):
            return None
        o = self.options
        _, n, k = self.weight.shape()
        if (o.weight_blocks_2d and "chained-gemm" in info.capabilities
                and rows * n * k >= CHAINED_MIN_MACS):
            q, t = gemm.quantize_with_transpose(self.weight,
                                                MxSpec(o.format, o.mode, BlockLayout_Tile32x32()),
                                                for_gemm=True)
            return q, t, gemm.WeightLayout.KN

        def kept(block):
            return gemm.quantize_keep_values(self.weight, MxSpec(o.format, o.mode, block))

        try:
            if o.weight_blocks_2d:
                q = kept(BlockLayout_Tile32x32())
                return q, q, gemm.WeightLayout.NK
            return kept(Along(2)), kept(Along(1)), gemm.WeightLayout.NK
        except Err as e:
            if e.value.kind == ErrorKind.UNSUPPORTED:
                return None
            raise

    def _with_values(self, t, offs, layout, weight):
        """t quantized along its rows with its wgrad values from the same pass (beside a
        weight's kept values, layout nk, with its own values kept; beside a transposed copy,
        layout kn, for a chained GEMM, naming `weight`, the one its GEMM reads), or None when
        the plugin cannot write them (an older ABI)."""
        o = self.options
        chained = layout == gemm.WeightLayout.KN
        try:
            q, _, v = gemm.quantize_with_wgrad_values(t, MxSpec(o.format, o.mode, Along(1)), offs,
                                                      keep_values=layout == gemm.WeightLayout.NK,
                                                      for_gemm=chained,
                                                      weight=weight if chained else None)
            return q, v
        except Err as e:
            if e.value.kind == ErrorKind.UNSUPPORTED:
                return None
            raise

    def forward(self, x, offs):
        """y = x_e · W_eᵀ per expert; keeps x (or its wgrad values) and a kept weight for
        the backward pass."""
        kept = self._weight_kept(x.shape()[0])
        w = gemm._Dense(self.weight) if kept is None else gemm._Quantized(kept[0])
        # beside the weight's kept values (layout nk) x keeps its own too, and so will dy;
        # beside its transposed copy (kn) both are quantized for the chained GEMM
        xq = None if kept is None else self._with_values(x, offs, kept[2], kept[0])
        if xq is None:
            y = gemm.forward(gemm._Dense(x), w, offs, self.options)
            self._saved = (x, False, list(offs), None if kept is None else kept[1:])
        else:
            y = gemm.forward(gemm._Quantized(xq[0]), w, offs, self.options)
            self._saved = (xq[1], True, list(offs), kept[1:])
        return y

    def apply(self, x, offs):
        """y without keeping anything (inference)."""
        return gemm.forward(gemm._Dense(x), gemm._Dense(self.weight), offs, self.options)

    def backward(self, dy):
        """Store dW = dy_eᵀ · x_e in `grad` and return dx = dy_e · W_e."""
        return self._backward(dy, True)

    def backward_weight(self, dy):
        """Only dW (the first layer of a model needs no input gradient)."""
        self._backward(dy, False)

    def _backward(self, dy, want_dx):
        if self._saved is None:
            raise ValueError("GroupedLinear.backward before forward")
        x, x_values, offs, w_dgrad = self._saved
        self._saved = None
        # dy's wgrad values from the pass that quantizes it for dgrad (as forward's x)
        dyq = self._with_values(dy, offs, w_dgrad[1], w_dgrad[0]) if x_values and want_dx else None
        dy_wgrad = dy if dyq is None else dyq[1]
        self.grad = gemm.wgrad(gemm._Dense(dy_wgrad), gemm._Dense(x), offs, self.options)
        del x
        if not want_dx:
            return None
        o = self.options
        if w_dgrad is None:
            w = gemm._Dense(self.weight)
        else:
            w = gemm._Quantized(w_dgrad[0])
            o = gemm.with_options(o, weight_layout=w_dgrad[1])
        a = gemm._Dense(dy) if dyq is None else gemm._Quantized(dyq[0])
        return gemm.dgrad(a, w, offs, o)

    def parameters(self):
        return [Param(self, "weight", self.grad)]


class ExpertActivation(enum.Enum):
    """The expert nonlinearity (the names print like the Rust enum's Debug)."""
    SwiGlu = "SwiGlu"  # up projects to 2F = [gate | value]; silu(gate) · value
    Silu = "Silu"
    Gelu = "Gelu"
    Relu = "Relu"

    def __str__(self):
        return self.value


class MoeConfig:
    """Shape and routing of a `MoeLayer` (defaults as in Rust's `MoeConfig::default()`)."""

    def __init__(self, experts=8, hidden=256, ffn=512, top_k=2,
                 activation=ExpertActivation.SwiGlu, renormalize=True,
                 align=topk.DEFAULT_ALIGN, capacity_factor=None, weight_blocks_2d=False):
        self.experts = experts
        self.hidden = hidden
        self.ffn = ffn
        self.top_k = top_k
        self.activation = activation
        self.renormalize = renormalize
        self.align = align
        self.capacity_factor = capacity_factor
        self.weight_blocks_2d = weight_blocks_2d

    def __repr__(self):
        return "MoeConfig(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"


class _Saved:
    __slots__ = ("x", "logits", "plan", "gates", "up_out", "expert_out")


_ACT = {
    ExpertActivation.Silu: Activation.SILU,
    ExpertActivation.Gelu: Activation.GELU,
    ExpertActivation.Relu: Activation.RELU,
}


class MoeLayer:
    """A routed-expert MoE layer: y = Σ_{e ∈ topk(x·Wrᵀ)} g_e(x) · down_e(act(up_e(x))).

    Fresh weights from `seed`: router N(0, 1/H) `[E, H]`, experts N(0, 1/fan-in):
    `up` [E, 2F, H] (SwiGLU) or [E, F, H], `down` [E, H, F]. Set `input_grad = False`
    for a first layer (no ∂L/∂x).
    """

    def __init__(self, config, seed):
        c = config
        up_n = 2 * c.ffn if c.activation == ExpertActivation.SwiGlu else c.ffn
        self.config = c
        self.router = Tensor.randn([c.experts, c.hidden], Dtype.F32, seed & _U64, 0.0,
                                   _inv_sqrt_f32(c.hidden))
        self.router_grad = None
        self.up = GroupedLinear(c.experts, c.hidden, up_n, (seed + 1) & _U64) \
            .weight_blocks_2d(c.weight_blocks_2d)
        self.down = GroupedLinear(c.experts, c.ffn, c.hidden, (seed + 2) & _U64) \
            .weight_blocks_2d(c.weight_blocks_2d)
        self.input_grad = True
        self._saved = None
        self.last_load = []
        self.last_dropped = 0

    def route_request(self, tokens, logits):
        """The routing request for router logits [tokens, E]."""
        c = self.config
        return RouteRequest(tokens, c.experts, c.top_k, logits, c.renormalize, c.align,
                            c.capacity_factor)

    def _activation(self, u):
        a = self.config.activation
        if a == ExpertActivation.SwiGlu:
            return ops.swiglu(u)
        return ops.act(u, _ACT[a])

    def _activation_backward(self, u, dh):
        a = self.config.activation
        if a == ExpertActivation.SwiGlu:
            return ops.swiglu_backward(u, dh)
        return ops.act_backward(u, dh, _ACT[a])

    def forward(self, x):
        """Route, dispatch, run the experts and combine: x [tokens, H] → [tokens, H]."""
        tokens = x.rows()
        logits = ops.matmul_nt(x, self.router).to_f32()
        try:
            plan = _routing.route(self.route_request(tokens, logits))
        except Err as e:
            raise RoutingError(f"routing failed: {e.value}") from None
        xd = ops.gather_rows(x, plan.source_token)
        up_out = self.up.forward(xd, plan.offs)
        h = self._activation(up_out)
        expert_out = self.down.forward(h, plan.offs)
        gates = ops.vector(plan.gate_weight)
        y = ops.scatter_add_rows(expert_out, plan.source_token, gates, tokens)
        self.last_load = list(plan.load)
        self.last_dropped = plan.dropped
        s = _Saved()
        s.x = ops.copy(x)
        s.logits, s.plan, s.gates, s.up_out, s.expert_out = logits, plan, gates, up_out, expert_out
        self._saved = s
        return y

    def backward(self, dy):
        """Backward from dy [tokens, H]: gradients of the router and both expert
        projections (stored in the layer); returns ∂L/∂x when `input_grad` is set."""
        s = self._saved
        if s is None:
            raise ValueError("MoeLayer.backward before forward")
        self._saved = None
        e, tokens = self.config.experts, s.x.rows()
        index = s.plan.source_token
        # Combine: y[t] = Σ_rows g_r · o_r, so dg_r = ⟨dy[t], o_r⟩ and do_r = g_r · dy[t].
        dy_rows = ops.gather_rows(dy, index)
        dgate = ops.row_dot(dy_rows, s.expert_out).to_f32()
        s.expert_out = None
        d_out = ops.scale_rows(dy_rows, s.gates)
        del dy_rows
        dh = self.down.backward(d_out)
        del d_out
        du = self._activation_backward(s.up_out, dh)
        del dh
        s.up_out = None
        if self.input_grad:
            dxd = self.up.backward(du)
            dx_experts = ops.scatter_add_rows(dxd, index, None, tokens)
            del dxd
        else:
            self.up.backward_weight(du)
            dx_experts = None
        del du
        # Router: gates → logits (the softmax Jacobian, here in the guest), then matmuls.
        experts_of_row = topk.row_experts(s.plan.offs)
        kept = [(t, x, g) for t, x, g in zip(index, experts_of_row, dgate) if t >= 0]
        dlogits = topk.router_softmax_backward(s.logits, e, self.config.top_k,
                                               self.config.renormalize, kept)
        dlogits = Tensor.from_f32([tokens, e], dlogits)
        self.router_grad = ops.matmul_tn(dlogits, s.x)
        if dx_experts is None:
            return None
        dx_router = ops.matmul(dlogits, self.router)
        return ops.add(dx_experts, dx_router)

    def parameters(self):
        """Router, up and down weights with their gradients."""
        return [
            Param(self, "router", self.router_grad),
            Param(self.up, "weight", self.up.grad),
            Param(self.down, "weight", self.down.grad),
        ]


class Sgd:
    """Plain SGD: p ← p − lr · g."""

    def __init__(self, lr):
        self.lr = lr

    def step(self, params):
        for p in params:
            if p.grad is not None:
                p.value = ops.sgd_step(p.value, p.grad, self.lr)


class AdamW:
    """AdamW (decoupled weight decay, bias-corrected) holding one pair of moment tensors
    per parameter, matched by position in the parameter list. Defaults are PyTorch's:
    betas (0.9, 0.999), eps 1e-8, weight decay 0.01."""

    def __init__(self, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, config=None):
        self.config = config or AdamwConfig(lr, beta1, beta2, eps, weight_decay)
        self.step_count = 0
        self._moments = []

    @classmethod
    def with_config(cls, config):
        return cls(config.lr, config=config)

    def step(self, params):
        self.step_count += 1
        while len(self._moments) < len(params):
            self._moments.append(None)
        for i, p in enumerate(params):
            g = p.grad
            if g is None:
                continue
            if self._moments[i] is None:
                shape = p.value.shape()
                self._moments[i] = (Tensor.zeros(shape, Dtype.F32), Tensor.zeros(shape, Dtype.F32))
            m, v = self._moments[i]
            np_, nm, nv = ops.adamw_step(p.value, g, m, v, self.step_count, self.config)
            p.value = np_
            self._moments[i] = (nm, nv)
