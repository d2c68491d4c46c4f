"""Python SDK for mxhost experiment guests (world `experiment`).

The same contract as the Rust SDK (`guest-sdk/`): tensors are host-owned handles,
MX quantization and grouped GEMM run in the active precision plugin, metrics go to
the host. Write a module with a `run(args)` function and run it with
`mxhost run my_experiment.py`:

    from mxhost_guest import *

    def run(args):
        x = Tensor.randn_f32([512, 256], 1)                   # [rows, K]
        w = Tensor.randn([4, 128, 256], Dtype.F32, 2, 0.0, 0.05)
        offs = [100, 100, 300, 512]                           # expert 1 is empty
        y = gemm.forward(Dense(x), Dense(w), offs, gemm.options())
        plugin.select("bf16")                                 # same tensors, other precision
        y16 = gemm.forward(Dense(x), Dense(w), offs, gemm.options())
        return f"{y.shape()} {y16.shape()}"

Host errors raise `HostError` (the binding's `Err` carrying an `Error` record with
`.kind` and `.message`); `error_text(e)` formats it like the Rust SDK
(`invalid-argument: ...`). Exceptions that escape `run` reach the user as the Python
traceback (see `mxhost_guest.entry`).

Modules: `gemm` (grouped GEMM, quantize), `plugin`, `ops` (tensor-ops), `nn`
(GroupedLinear, MoeLayer, Sgd, AdamW), `topk` (routing in plain Python, router
backward), `reference` (FP64 reference GEMMs, SNR; plain Python).
"""

from componentize_py_types import Err as HostError, Ok, Some  # noqa: F401
from wit_world.imports import metrics as _metrics
from wit_world.imports import routing as _routing
from wit_world.imports.grouped_gemm import (  # noqa: F401
    GemmOptions,
    Operand_Dense as Dense,
    Operand_Quantized as Quantized,
    WeightLayout,
)
from wit_world.imports.mx import MxTensor  # noqa: F401
from wit_world.imports.plugins import PluginInfo  # noqa: F401
from wit_world.imports.routing_types import RoutePlan, RouteRequest  # noqa: F401
from wit_world.imports.tensors import Tensor
from wit_world.imports.types import (  # noqa: F401
    BlockLayout_Along as Along,
    BlockLayout_Tile32x32,
    DeviceKind,
    Dtype,
    ElementFormat,
    Error,
    ErrorKind,
    MxSpec,
    ScaleMode,
)

#: The 32×32 tile block layout (a value, like `BlockLayout::Tile32x32` in Rust).
Tile32x32 = BlockLayout_Tile32x32()

_KIND_NAMES = {
    ErrorKind.INVALID_ARGUMENT: "invalid-argument",
    ErrorKind.UNSUPPORTED: "unsupported",
    ErrorKind.LIMIT_EXCEEDED: "limit-exceeded",
    ErrorKind.REJECTED_BY_GUARD: "rejected-by-guard",
    ErrorKind.BACKEND_FAILURE: "backend-failure",
    ErrorKind.BAD_HANDLE: "bad-handle",
}


def kind_name(kind):
    """The WIT name of an error kind (`invalid-argument`, ...), for messages."""
    return _KIND_NAMES.get(kind, str(kind))


def error_text(e):
    """`kind: message` for a host error (an `HostError` or its `Error` value)."""
    v = getattr(e, "value", e)
    if isinstance(v, Error):
        return f"{kind_name(v.kind)}: {v.message}"
    return str(v)


# Tensor conveniences, mirroring the Rust SDK's `impl Tensor` additions.
def _randn_f32(shape, seed):
    """Standard-normal f32 tensor drawn by the host from `seed`."""
    return Tensor.randn(list(shape), Dtype.F32, seed, 0.0, 1.0)


def _rows(self):
    """Row count (first dimension)."""
    s = self.shape()
    return s[0] if s else 0


Tensor.randn_f32 = staticmethod(_randn_f32)
Tensor.rows = _rows


def randn(shape, seed, dtype=Dtype.F32, mean=0.0, std=1.0):
    """Normal(mean, std) samples drawn by the host (ChaCha8, reproducible)."""
    return Tensor.randn(list(shape), dtype, seed, mean, std)


def zeros(shape, dtype=Dtype.F32):
    return Tensor.zeros(list(shape), dtype)


def from_f32(shape, data):
    """A tensor from guest values (row-major; any float sequence)."""
    return Tensor.from_f32(list(shape), data if isinstance(data, list) else list(data))


def to_f32(t):
    return t.to_f32()


def mx_spec(format=ElementFormat.E4M3, block=None, mode=ScaleMode.RCEIL):
    """An MX recipe: `mx_spec(ElementFormat.E4M3, Along(1))`, rceil scales by default."""
    return MxSpec(format, mode, Along(1) if block is None else block)


def metric(name, step, value):
    """Record one point of a metric series (metrics.csv and plots on the host)."""
    _metrics.record(name, step, value)


def progress(done, total, label):
    """Progress of a long phase (a progress bar on the host)."""
    _metrics.progress(done, total, label)


def log(message, level=_metrics.Level.INFO):
    """Log a line through the host."""
    _metrics.log(level, message)


Level = _metrics.Level


def route(request):
    """Route a batch with the host's router (a `--router` guest or the built-in top-k).
    Raises `HostError` with the router's message on failure."""
    return _routing.route(request)


from . import gemm, plugin, ops, nn, topk, reference  # noqa: E402,F401
from .nn import (  # noqa: E402,F401
    AdamW,
    ExpertActivation,
    GroupedLinear,
    MoeConfig,
    MoeLayer,
    Param,
    Sgd,
)
from .entry import Failure, export_experiment  # noqa: E402,F401

__all__ = [
    "HostError", "Dense", "Quantized", "GemmOptions", "WeightLayout", "MxTensor",
    "PluginInfo", "RoutePlan", "RouteRequest", "Tensor", "Along", "Tile32x32",
    "DeviceKind", "Dtype", "ElementFormat", "Error", "ErrorKind", "MxSpec", "ScaleMode",
    "kind_name", "error_text", "randn", "zeros", "from_f32", "to_f32", "mx_spec",
    "metric", "progress", "log", "Level", "route", "gemm", "plugin", "ops", "nn", "topk",
    "reference", "AdamW", "ExpertActivation", "GroupedLinear", "MoeConfig", "MoeLayer",
    "Param", "Sgd", "Failure", "export_experiment",
]
