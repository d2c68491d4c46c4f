"""FP64 reference computations for checking results inside a guest, in plain Python
(no host calls, no numpy): the three grouped GEMM passes in the `_grouped_mm`
convention (weights [E, N, K], flat row-major lists) and SNR. The Rust SDK's
`mxhost_guest::reference`, with the same signatures.

Products of f32 values are exact in f64; sums use `math.fsum`-grade `math.sumprod`
when available (Python ≥ 3.12), so results can differ from the Rust loop in the last
bits — far below anything an SNR in dB shows.
"""

import math
from operator import mul

try:
    _dot = math.sumprod
except AttributeError:  # Python < 3.12
    def _dot(a, b):
        return sum(map(mul, a, b))


def groups(offs):
    """Row range (start, end) of each expert from cumulative end offsets."""
    out, start = [], 0
    for end in offs:
        out.append((start, end))
        start = end
    return out


def _rows(v, start, end, width):
    return [v[r * width:(r + 1) * width] for r in range(start, end)]


def forward(x, w, offs, rows, n, k):
    """y[rows, n] = x_e · w_eᵀ; x: [rows, k], w: [E, n, k]. Padding rows stay zero."""
    y = [0.0] * (rows * n)
    for e, (s, t) in enumerate(groups(offs)):
        if t <= s:
            continue
        we = _rows(w, e * n, (e + 1) * n, k)
        for r in range(s, t):
            xr = x[r * k:(r + 1) * k]
            y[r * n:(r + 1) * n] = [_dot(xr, wj) for wj in we]
    return y


def dgrad(dy, w, offs, rows, n, k):
    """dx[rows, k] = dy_e · w_e; dy: [rows, n], w: [E, n, k]."""
    dx = [0.0] * (rows * k)
    for e, (s, t) in enumerate(groups(offs)):
        if t <= s:
            continue
        we_t = list(zip(*_rows(w, e * n, (e + 1) * n, k)))  # [k][n]
        for r in range(s, t):
            dyr = dy[r * n:(r + 1) * n]
            dx[r * k:(r + 1) * k] = [_dot(dyr, col) for col in we_t]
    return dx


def wgrad(dy, x, offs, n, k):
    """dw[E, n, k] = dy_eᵀ · x_e; dy: [rows, n], x: [rows, k]."""
    dw = [0.0] * (len(offs) * n * k)
    for e, (s, t) in enumerate(groups(offs)):
        if t <= s:
            continue
        dy_t = list(zip(*_rows(dy, s, t, n)))  # [n][rows]
        x_t = list(zip(*_rows(x, s, t, k)))  # [k][rows]
        base = e * n * k
        for j, dyj in enumerate(dy_t):
            dw[base + j * k:base + (j + 1) * k] = [_dot(dyj, xc) for xc in x_t]
    return dw


def snr_db(reference, out):
    """SNR in dB: 10·log10(Σ ref² / Σ (ref − out)²); infinite when identical."""
    if len(reference) != len(out):
        raise ValueError(f"snr_db: length mismatch ({len(reference)} vs {len(out)})")
    signal = _dot(reference, reference)
    diff = [r - o for r, o in zip(reference, out)]
    noise = _dot(diff, diff)
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / noise)
