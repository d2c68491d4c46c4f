"""Bit-exact f32 arithmetic in Python, for guest-side computations that must match
the Rust SDK (compiled to wasm32-wasip2) bit for bit.

- `f32(x)`: round a Python float (f64) to the nearest f32. Sums, differences,
  products and quotients of two f32 values computed in f64 and rounded once give
  the correctly rounded f32 result (53 ≥ 2·24 + 2, so double rounding is innocuous).
- `expf(x)`: musl's `expf` (the ARM optimized-routines algorithm, which Rust's
  `f32::exp` calls through wasi-libc on wasm32-wasip2), ported operation by
  operation; it evaluates in f64 and rounds once.
"""

import math
import struct

_pack_f = struct.Struct("<f")
_pack_d = struct.Struct("<d")
_pack_q = struct.Struct("<Q")


def f32(x):
    """Round to the nearest f32 (ties to even); overflow gives ±inf."""
    try:
        return _pack_f.unpack(_pack_f.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


_N = 32
# tab[i] = asuint64(2^(i/N)) - (i << 47)  (musl __exp2f_data.tab)
_TAB = (
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
)
_SHIFT = float.fromhex("0x1.8p+52")
_INVLN2N = float.fromhex("0x1.71547652b82fep+0") * _N
_C0 = float.fromhex("0x1.c6af84b912394p-5") / _N / _N / _N
_C1 = float.fromhex("0x1.ebfce50fac4f3p-3") / _N / _N
_C2 = float.fromhex("0x1.62e42ff0c52d6p-1") / _N
_OFLOW = float.fromhex("0x1.62e42ep6")
_UFLOW = float.fromhex("-0x1.9fe368p6")
_MASK64 = (1 << 64) - 1


def expf(x):
    """e^x of an f32 `x`, as musl's expf computes it (f32 result as a Python float)."""
    if not (-88.0 < x < 88.0):
        if x != x:
            return x
        if x == -math.inf:
            return 0.0
        if x == math.inf:
            return x
        if x > _OFLOW:
            return math.inf
        if x < _UFLOW:
            return 0.0
    z = _INVLN2N * x
    kd = z + _SHIFT
    ki = _pack_q.unpack(_pack_d.pack(kd))[0]
    kd -= _SHIFT
    r = z - kd
    t = (_TAB[ki % _N] + ((ki << 47) & _MASK64)) & _MASK64
    s = _pack_d.unpack(_pack_q.pack(t))[0]
    z = _C0 * r + _C1
    r2 = r * r
    y = _C2 * r + 1.0
    y = z * r2 + y
    y = y * s
    return f32(y)
