"""toy-moe: train one MoE layer on a synthetic regression task, twice from one seed —
with plugin `mxfp8` and with plugin `bf16`, switched at run time — and compare. The
Python twin of guest-examples/toy-moe: the same host operations in the same order, so
the same seed and args give the same losses bit for bit.

The target is a fixed random *teacher* MoE (same shape, other weights, its own router).
Both runs see the same batches and start from the same weights; targets are computed
with plugin `bf16` so they are identical for both runs.

Records `loss/mxfp8` and `loss/bf16` per step, and checks: each run's mean loss over
the last 20% of steps ≤ half its mean over the first 20%; MXFP8's tail mean ≤ 1.10 ×
BF16's. Fails (exit code 1) when a criterion fails.

Args (all optional): --steps S --tokens T --experts E --k K --hidden H --ffn F
--lr LR --seed S --pool P --act swiglu|silu|gelu --opt adamw|sgd --blocks-2d
--target-scale S (default 1) --latent L (inputs on a random L-dimensional subspace;
default 16, 0 for full-rank inputs).

    mxhost run guest-examples/python/toy_moe.py --out out/toy-moe-py [-- --steps 200]
"""

import math
import time

from mxhost_guest import (
    AdamW, Dtype, ExpertActivation, Failure, MoeConfig, MoeLayer, Sgd, Tensor, metric, ops,
    plugin, progress,
)
from mxhost_guest._f32 import f32

U64 = (1 << 64) - 1


def flag(args, name, default, parse):
    if name not in args:
        return default
    i = args.index(name)
    if i + 1 >= len(args):
        raise Failure(f"{name} needs a value")
    try:
        return parse(args[i + 1])
    except ValueError:
        raise Failure(f'bad value for {name}: Some("{args[i + 1]}")') from None


def u32(s):
    v = int(s)
    if not 0 <= v < 1 << 32:
        raise ValueError(s)
    return v


def u64(s):
    v = int(s)
    if not 0 <= v < 1 << 64:
        raise ValueError(s)
    return v


def rust_f32_display(v):
    """An f32 printed like Rust's `{}`: the shortest digits that round-trip, no exponent."""
    for p in range(1, 10):
        s = f"{v:.{p - 1}e}"
        if f32(float(s)) == v:
            break
    mant, exp = s.split("e")
    exp = int(exp)
    sign = "-" if mant.startswith("-") else ""
    digits = mant.lstrip("-").replace(".", "").rstrip("0") or "0"
    point = exp + 1  # digits before the decimal point
    if point <= 0:
        out = "0." + "0" * -point + digits
    elif point >= len(digits):
        out = digits + "0" * (point - len(digits))
    else:
        out = digits[:point] + "." + digits[point:]
    return sign + out


class Cfg:
    pass


def parse(args):
    acts = {"swiglu": ExpertActivation.SwiGlu, "silu": ExpertActivation.Silu,
            "gelu": ExpertActivation.Gelu}
    act = flag(args, "--act", "swiglu", str)
    if act not in acts:
        raise Failure(f"--act {act}: use swiglu|silu|gelu")
    opt = flag(args, "--opt", "adamw", str)
    if opt not in ("adamw", "sgd"):
        raise Failure(f"--opt {opt}: use adamw|sgd")
    sgd = opt == "sgd"
    c = Cfg()
    c.steps = flag(args, "--steps", 200, int)
    if c.steps < 5:
        raise Failure("--steps must be at least 5 (the criteria compare 20% windows)")
    c.tokens = flag(args, "--tokens", 512, u32)
    c.moe = MoeConfig(
        experts=flag(args, "--experts", 8, u32),
        hidden=flag(args, "--hidden", 256, u32),
        ffn=flag(args, "--ffn", 512, u32),
        top_k=flag(args, "--k", 2, u32),
        activation=acts[act],
        weight_blocks_2d="--blocks-2d" in args,
    )
    c.lr = f32(flag(args, "--lr", 0.5 if sgd else 2e-3, float))
    c.seed = flag(args, "--seed", 1, u64)
    c.pool = flag(args, "--pool", 0, int)
    c.sgd = sgd
    c.target_scale = f32(flag(args, "--target-scale", 1.0, float))
    c.latent = flag(args, "--latent", 16, u32)
    return c


class Data:
    """Batches: inputs drawn by the host, targets from the teacher under plugin `bf16`."""

    def __init__(self, cfg):
        self.teacher = MoeLayer(cfg.moe, (cfg.seed + 1000) & U64)
        self.tokens = cfg.tokens
        self.hidden = cfg.moe.hidden
        self.seed = (cfg.seed * 7919 + 17) & U64
        self.target_scale = cfg.target_scale
        # [latent, hidden]: inputs lie on a random latent-dimensional subspace.
        self.projection = None
        self.latent = cfg.latent
        if cfg.latent > 0:
            std = f32(1.0 / f32(math.sqrt(f32(float(cfg.latent)))))
            self.projection = Tensor.randn([cfg.latent, cfg.moe.hidden], Dtype.F32,
                                           (cfg.seed + 2000) & U64, 0.0, std)
        self.pool = [self.make(i) for i in range(cfg.pool)]

    def make(self, i):
        seed = (self.seed + i) & U64
        if self.projection is not None:
            x = ops.matmul(Tensor.randn_f32([self.tokens, self.latent], seed), self.projection)
        else:
            x = Tensor.randn_f32([self.tokens, self.hidden], seed)
        active = plugin.active()
        plugin.select("bf16")
        try:
            t = self.teacher.forward(x)
        finally:
            plugin.select(active)
        return x, ops.scale(self.target_scale, t)

    def batch(self, step):
        if not self.pool:
            return self.make(step)
        return self.pool[step % len(self.pool)]


def train(name, cfg, data):
    """One training run: the page of PyTorch."""
    plugin.select(name)
    moe = MoeLayer(cfg.moe, cfg.seed)
    moe.input_grad = False  # a first layer: no ∂L/∂x
    opt = Sgd(cfg.lr) if cfg.sgd else AdamW(cfg.lr)
    start = time.monotonic()
    losses = []
    max_drop = 0
    for step in range(cfg.steps):
        x, target = data.batch(step)
        y = moe.forward(x)
        loss, dy = ops.mse_loss(y, target)
        moe.backward(dy)
        del x, target, y, dy
        opt.step(moe.parameters())
        if not (loss == loss and abs(loss) != float("inf")):
            raise Failure(f"{name}: loss is {loss} at step {step}")
        max_drop = max(max_drop, moe.last_dropped)
        metric(f"loss/{name}", step, loss)
        progress(step + 1, cfg.steps, f"train {name}")
        losses.append(loss)
    return name, losses, time.monotonic() - start, max_drop


def mean(v):
    return sum(v) / max(len(v), 1)


def windows(v):
    """Means of the first and last 20% of a series (at least one point each)."""
    w = max(len(v) // 5, 1)
    return mean(v[:w]), mean(v[-w:])


def pass_(ok):
    return "pass" if ok else "FAIL"


def run(args):
    cfg = parse(args)
    m = cfg.moe
    pool = ("a fresh batch per step" if cfg.pool == 0 else f"{cfg.pool} batches cycled")
    print(f"toy-moe: {m.experts} experts, top-{m.top_k}, hidden {m.hidden}, FFN {m.ffn} "
          f"({m.activation}), {cfg.tokens} tokens/step, {cfg.steps} steps, "
          f"{'SGD' if cfg.sgd else 'AdamW'} lr {rust_f32_display(cfg.lr)}, seed {cfg.seed}, {pool}")
    t0 = time.monotonic()
    data = Data(cfg)
    data_s = time.monotonic() - t0
    runs = [train("mxfp8", cfg, data), train("bf16", cfg, data)]
    plugin.select("mxfp8")

    print(f"{'plugin':<7} {'first':>10} {'last':>10} {'first-20%':>10} {'last-20%':>10} "
          f"{'tail/head':>9} {'time':>8}")
    failures = []
    tails = []
    for name, losses, seconds, max_drop in runs:
        head, tail = windows(losses)
        print(f"{name:<7} {losses[0]:>10.5f} {losses[-1]:>10.5f} {head:>10.5f} {tail:>10.5f} "
              f"{tail / head:>9.3f} {seconds:>7.1f}s")
        if max_drop > 0:
            print(f"  ({max_drop} dropped (token, choice) pairs at most per step)")
        if not tail <= 0.5 * head:
            failures.append(f"{name}: last-20% mean {tail:.5f} > half the first-20% mean {head:.5f}")
        tails.append(tail)
    ratio = tails[0] / tails[1]
    ok = ratio <= 1.10
    print(f"tail-mean ratio MXFP8/BF16: {ratio:.4f}")
    print(f"criteria: last-20% ≤ 0.5 × first-20% (mxfp8 "
          f"{pass_(tails[0] <= 0.5 * windows(runs[0][1])[0])}, bf16 "
          f"{pass_(tails[1] <= 0.5 * windows(runs[1][1])[0])}); MXFP8 tail ≤ 1.10 × BF16 tail "
          f"({pass_(ok)})")
    print(f"time: data {data_s:.1f}s, mxfp8 {runs[0][2]:.1f}s, bf16 {runs[1][2]:.1f}s")
    if not ok:
        failures.append(f"MXFP8/BF16 tail-mean ratio {ratio:.4f} > 1.10")
    if failures:
        raise Failure("toy-moe criteria failed: " + "; ".join(failures))
    return f"toy-moe: PASS (MXFP8/BF16 tail ratio {ratio:.4f}, both losses fell below half)"
