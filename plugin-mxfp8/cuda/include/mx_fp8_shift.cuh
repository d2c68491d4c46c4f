// mx_fp8_shift.cuh — an FP8 element byte moved down d binades, exactly or not at all: the
// re-encoding to one scale per 128-deep stage (mx_reencode.cuh and the kernels that write chain
// forms) shifts every byte of a block by the distance from its scale to the stage's largest.
// Split from mx_reencode.cuh so that the host can compile and check it on every byte
// (plugin-mxfp8/tests/fp8_shift_host.rs: g++ through tests/host/simt.hpp, against
// mx_fp8_shift_exact and the CPU reference src/numerics/reencode.rs).
// Requires mx_ptx.cuh (types, MX_DEV) and mx_numerics.cuh (MxFmt). NVRTC-clean.
#pragma once

// An FP8 byte's magnitude as an integer multiple of the format's subnormal spacing
// (E4M3 2^-9, E5M2 2^-16): at most MB + 1 significant bits.
template <int FMT> MX_DEV mx_u32 mx_fp8_units(mx_u32 b) {
  constexpr int MB = MxFmt<FMT>::mbits;
  const mx_u32 E = (b & 0x7Fu) >> MB, m = b & ((1u << MB) - 1u);
  return E == 0 ? m : (((1u << MB) + m) << (E - 1));
}
// The FP8 value (finite bytes) as an FP32, exactly.
template <int FMT> MX_DEV float mx_fp8_value(mx_u32 b) {
  constexpr float UNIT = FMT == 0 ? 0.001953125f : 1.52587890625e-05f;   // 2^-9, 2^-16
  const float v = (float)mx_fp8_units<FMT>(b) * UNIT;
  return (b & 0x80u) ? -v : v;
}

// b * 2^-d re-encoded in FMT when exact (returns the byte, ok = true); else ok = false.
template <int FMT> MX_DEV mx_u32 mx_fp8_shift_exact(mx_u32 b, mx_u32 d, bool& ok) {
  constexpr int MB = MxFmt<FMT>::mbits;
  const mx_u32 I = mx_fp8_units<FMT>(b);
  if (d >= 32u) { ok = I == 0; return 0; }
  ok = (I & ((1u << d) - 1u)) == 0;
  const mx_u32 J = I >> d;
  if (!ok || J == 0) return ok ? (b & 0x80u) : 0u;
  if (J < (1u << MB)) return (b & 0x80u) | J;                          // subnormal
  const int h = 31 - __clz((int)J);                                    // J's top bit, >= MB
  return (b & 0x80u) | ((mx_u32)(h - MB + 1) << MB) | ((J >> (h - MB)) - (1u << MB));
}

// b * 2^d for a byte b that mx_fp8_shift_exact(orig, d) returned with ok: orig, exactly (units
// are an FP8 byte's canonical integer, so the re-encoding of orig's units gives orig's byte; a
// signed zero keeps its sign). What mx_plain_from_form.cuh writes back from a chain form.
template <int FMT> MX_DEV mx_u32 mx_fp8_unshift(mx_u32 b, mx_u32 d) {
  constexpr int MB = MxFmt<FMT>::mbits;
  const mx_u32 I = mx_fp8_units<FMT>(b);
  if (I == 0u || d >= 32u) return b & 0x80u;   // (ok with d >= 32 only for a zero)
  const mx_u32 J = I << d;                      // < 2^32: orig's own units
  if (J < (1u << MB)) return (b & 0x80u) | J;   // subnormal
  const int h = 31 - __clz((int)J);
  return (b & 0x80u) | ((mx_u32)(h - MB + 1) << MB) | ((J >> (h - MB)) - (1u << MB));
}

// The rare bytes of mx_fp8_shift4 (bit 8 j of `rest` set: E <= d), byte by byte: `out` (the
// fast path's word) with those bytes replaced by their shifted bytes (low word), and their miss
// bits (high word; one 64-bit value, so that nothing goes through the stack, and nothing but
// the result lives across the call). Out of line on purpose: inlined at each of a kernel's 16-32
// call sites, this loop made mx_reencode_pair 126 KB of code, and ncu found its warps waiting on
// instruction fetch 46 % of the time (run 128).
template <int FMT> __device__ __noinline__ mx_u64 mx_fp8_shift4_rest(mx_u32 w, mx_u32 d, mx_u32 rest, mx_u32 out) {
  mx_u32 miss = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if ((rest >> (8 * j)) & 1u) {
      bool ok;
      const mx_u32 b = mx_fp8_shift_exact<FMT>((w >> (8 * j)) & 0xFFu, d, ok);
      out = (out & ~(0xFFu << (8 * j))) | (b << (8 * j));
      if (!ok) miss |= 1u << j;
    }
  }
  return (mx_u64)miss << 32 | out;
}

// Four bytes at once, with plain 32-bit arithmetic: sm_90 has no byte-SIMD compare or subtract,
// so __vcmpgtu4 / __vcmpeq4 / __vsub4 each took several instructions, and the re-encoding
// kernels, which call this for every word, were issue-bound (mx_reencode_pair: 70 % of issue
// slots, docs/perf.md run 129). Most bytes take the fast path: a zero keeps its byte, and a byte
// whose exponent field E exceeds d stays normal, so its new byte is b - (d << MB) (exact: the
// mantissa is unchanged). With m = b & 0x7F (< 0x80, so no carry leaves a byte):
//   E > d   <=>  m >= (d + 1) << MB  <=>  bit 7 of m + (0x80 - ((d + 1) << MB)) (d >= 1);
//   b != +-0 <=>  bit 7 of m + 0x7F.
// (d + 1) << MB is capped at 0x80, where no byte is fast (E4M3 d >= 15, E5M2 d >= 31). The
// others (E <= d: the result is subnormal or not representable) go through mx_fp8_shift_exact
// (mx_fp8_shift4_rest). miss: bit j set when byte j is a residual. Every (byte, d) is checked
// against mx_fp8_shift_exact on the host (tests/fp8_shift_host.rs).
// The fast path alone, without a branch: the word with every fast byte shifted, and in `rest`
// (bit 8 j for byte j) the bytes that need the exact route (none when d == 0: every byte keeps
// its value). A caller that shifts many words can test their rests together and take
// mx_fp8_shift4 only for the rare word that has one (mx_reencode_pair.cuh; a miss needs a rest).
template <int FMT> MX_DEV mx_u32 mx_fp8_shift4_fast(mx_u32 w, mx_u32 d, mx_u32& rest) {
  constexpr int MB = MxFmt<FMT>::mbits;
  const mx_u32 m = w & 0x7F7F7F7Fu;
  const mx_u32 t = d < (0x80u >> MB) ? (d + 1u) << MB : 0x80u;
  const mx_u32 fast = (m + (0x80u - t) * 0x01010101u) & 0x80808080u;
  const mx_u32 nonzero = (m + 0x7F7F7F7Fu) & 0x80808080u;
  rest = d == 0 ? 0u : (nonzero & ~fast) >> 7;   // (d == 0: subnormal bytes are not fast, but stay)
  // a fast byte has d < E <= 31, so d << MB fits its byte and the subtraction borrows nothing
  // (shifted after the product: one value per d stays live in the callers' loops, not two)
  return w - (((fast >> 7) * d) << MB);
}

template <int FMT> MX_DEV mx_u32 mx_fp8_shift4(mx_u32 w, mx_u32 d, mx_u32& miss) {
  miss = 0;
  if (d == 0) return w;
  mx_u32 rest;   // bit 8 j: byte j takes the exact route
  const mx_u32 out = mx_fp8_shift4_fast<FMT>(w, d, rest);
  if (!rest) return out;
  const mx_u64 r = mx_fp8_shift4_rest<FMT>(w, d, rest, out);
  miss = (mx_u32)(r >> 32);
  return (mx_u32)r;
}
