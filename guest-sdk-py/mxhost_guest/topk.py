"""Top-k routing in plain Python (no host calls), bit-for-bit the Rust SDK's
`mxhost_guest::topk`: the router algorithm, the expert of each row of a plan, and the
backward pass of the router's softmax over the selected experts.

Semantics (the host's built-in router, `host/src/routing.rs`): softmax over each
token's logits; the k largest probabilities, ties to the lower expert index; gate
weights renormalised over the k chosen experts when asked; tokens in order, each
token's choices in descending probability; an expert full at
`ceil(capacity_factor · tokens · k / experts)` drops the choice; rows sorted by expert,
tokens in order inside an expert, each group padded with -1 rows (gate 0) to a multiple
of `align`.

f32 arithmetic is emulated exactly (`_f32`), so `router_softmax_backward` gives the
same bits as the Rust guest and a Python toy-MoE trains like the Rust one.
"""

import math

from ._f32 import expf, f32

#: The default group alignment (one MX block of rows).
DEFAULT_ALIGN = 32


def capacity(tokens, experts, top_k, cf):
    """The expert capacity for a capacity factor, or None without a limit."""
    if cf is None:
        return None
    return math.ceil(float(f32(cf)) * float(tokens * top_k) / float(experts))


def select(row, k):
    """The k chosen experts of one token (descending probability, ties to the lower
    index) and the row's unnormalised softmax terms exp(l - max) as f32 values."""
    mx = -math.inf
    for v in row:
        if v > mx:
            mx = v
    exp = [expf(f32(v - mx)) for v in row]
    order = sorted(range(len(row)), key=lambda j: (-exp[j], j))
    return order[:k], exp


class Plan:
    """A routing plan (mirrors the WIT `route-plan`)."""

    def __init__(self):
        self.source_token = []
        self.gate_weight = []
        self.offs = []
        self.load = []
        self.dropped = 0


def route(request):
    """Route one batch: `request` is a `RouteRequest` (or anything with its fields)."""
    t, e, k = request.tokens, request.experts, request.top_k
    if e == 0 or k == 0 or k > e:
        raise ValueError(f"need 1 ≤ top-k ≤ experts, got top-k {k} with {e} experts")
    if request.align == 0:
        raise ValueError("align must be at least 1")
    logits = request.logits
    if len(logits) != t * e:
        raise ValueError(
            f"logits has {len(logits)} values, expected tokens × experts = {t} × {e}")
    cf = request.capacity_factor
    if cf is not None and not (math.isfinite(cf) and cf > 0.0):
        raise ValueError(f"capacity factor must be positive, got {cf}")
    cap = capacity(t, e, k, cf)
    per_expert = [[] for _ in range(e)]
    dropped = 0
    for tok in range(t):
        row = logits[tok * e:(tok + 1) * e]
        if not all(math.isfinite(v) for v in row):
            raise ValueError(f"token {tok} has non-finite logits")
        chosen, exp = select(row, k)
        denom = -0.0
        for j in (chosen if request.renormalize else range(e)):
            denom = f32(denom + exp[j])
        for x in chosen:
            if cap is not None and len(per_expert[x]) >= cap:
                dropped += 1
                continue
            per_expert[x].append((tok, f32(exp[x] / denom)))
    align = request.align
    plan = Plan()
    plan.dropped = dropped
    for rows in per_expert:
        for tok, w in rows:
            plan.source_token.append(tok)
            plan.gate_weight.append(w)
        pad = -(-len(rows) // align) * align - len(rows)
        plan.source_token.extend([-1] * pad)
        plan.gate_weight.extend([0.0] * pad)
        plan.offs.append(len(plan.source_token))
        plan.load.append(len(rows))
    return plan


def row_experts(offs):
    """The expert of each row of a plan (from its offsets)."""
    out = []
    start = 0
    for e, end in enumerate(offs):
        out.extend([e] * max(end - start, 0))
        start = end
    return out


def router_softmax_backward(logits, experts, top_k, renormalize, dgate):
    """Backward of the gate weights through the router softmax.

    `dgate` holds (token, expert, ∂L/∂gate) for every kept row; returns ∂L/∂logits
    [tokens, experts] as a flat list of f32 values. Renormalised: for j selected
    ∂L/∂l_j = g_j (d_j − Σ_e d_e g_e), else 0; not renormalised: the same over all
    experts with g = softmax.
    """
    tokens = len(logits) // max(experts, 1)
    d = [0.0] * (tokens * experts)
    for t, e, g in dgate:
        d[t * experts + e] += g
    out = [0.0] * (tokens * experts)
    every = range(experts)
    for t in range(tokens):
        base = t * experts
        chosen, exp = select(logits[base:base + experts], top_k)
        chosen_set = chosen if renormalize else every
        denom = 0.0
        for j in chosen_set:
            denom += exp[j]
        dot = 0.0
        for j in chosen_set:
            dot += d[base + j] * (exp[j] / denom)
        for j in chosen_set:
            out[base + j] = f32((exp[j] / denom) * (d[base + j] - dot))
    return out
