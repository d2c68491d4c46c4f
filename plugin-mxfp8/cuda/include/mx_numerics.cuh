// mx_numerics.cuh — MX (OCP Microscaling) rules, bit-exact with shared/notes/mx-numerics.md.
// Requires mx_ptx.cuh. NVRTC-clean.
//
// Formats: FMT 0 = E4M3 (bias 7, max 448, emax_elem 8, 3 mantissa bits)
//          FMT 1 = E5M2 (bias 15, max 57344, emax_elem 15, 2 mantissa bits)
// Scale modes: 0 = rceil (default), 1 = floor (OCP v1.0), 2 = even (reference rule).
// Non-finite rule (mxhost): a block holding any NaN or +-Inf gets scale byte 0xFF and
// every element byte of the block is 0x7F (NaN in both formats).
#pragma once

#define MX_MODE_RCEIL 0
#define MX_MODE_FLOOR 1
#define MX_MODE_EVEN  2

template <int FMT> struct MxFmt;
template <> struct MxFmt<0> { static constexpr int emax = 8;  static constexpr int mbits = 3; static constexpr float maxv = 448.0f; };
template <> struct MxFmt<1> { static constexpr int emax = 15; static constexpr int mbits = 2; static constexpr float maxv = 57344.0f; };

// amax_bits: the largest (bits & 0x7FFFFFFF) over the block, as an unsigned integer.
// Returns the E8M0 byte; 0xFF when the block holds a NaN/Inf (amax_bits >= 0x7F800000).
// RCP = true (the quantizer kernels): rceil's v = amax / elem_max is computed as
// amax * RN(1 / elem_max) (0x3B124925 for 448, 0x37924925 for 57344) instead of the IEEE
// division. Checked exhaustively on the CPU (IEEE binary32, no flush): for every finite amax
// (0 .. 0x7F7FFFFF) both give the same scale byte for both formats. The division's
// slow-path call cost ~60 registers.
template <int FMT, bool RCP = false> MX_DEV mx_u32 mx_scale_byte(mx_u32 amax_bits, int mode) {
  if (amax_bits >= 0x7F800000u) return 0xFFu;
  if (mode == MX_MODE_FLOOR) {
    int e = (int)(amax_bits >> 23) - MxFmt<FMT>::emax;
    return (mx_u32)(e < 0 ? 0 : e);
  }
  if (mode == MX_MODE_EVEN) {
    mx_u32 r = (amax_bits + (1u << (23 - MxFmt<FMT>::mbits - 1))) & 0x7F800000u;
    int e = (int)(r >> 23) - MxFmt<FMT>::emax;
    return (mx_u32)(e < 1 ? 1 : e);
  }
  // rceil
  const float v = RCP ? __fmul_rn(__int_as_float((int)amax_bits), __int_as_float(FMT == 0 ? 0x3B124925 : 0x37924925))
                      : __fdiv_rn(__int_as_float((int)amax_bits), MxFmt<FMT>::maxv);
  mx_u32 vb = (mx_u32)__float_as_int(v);
  if (vb == 0) return 0;
  mx_u32 E = vb >> 23, M = vb & 0x7FFFFFu;
  if (M > 0 && E != 0xFEu && !(E == 0 && M <= 0x400000u)) E += 1;
  return E;
}

// 2^(127-b) as an FP32 factor (b in 0..254); multiplication by it is exact.
MX_DEV float mx_inv_scale(mx_u32 b) {
  return b <= 253u ? __int_as_float((int)((254u - b) << 23)) : __int_as_float(0x00400000);
}
// E8M0 byte -> FP32 value 2^(b-127); b = 0 is 2^-127 (an FP32 subnormal), 0xFF is NaN.
MX_DEV float mx_e8m0_to_f32(mx_u32 b) {
  if (b == 0xFFu) return __int_as_float(0x7FC00000);
  if (b == 0u) return __int_as_float(0x00400000);
  return __int_as_float((int)(b << 23));
}

// One FP32 -> FP8 byte in software, bit-identical to cvt.rn.satfinite (round to nearest
// even, finite values saturate to +-max, subnormals exact, the sign of zero kept; NaN ->
// 0x7F, which the quantizers never pass: a block holding a NaN/Inf is encoded without
// converting). The portable kernels (devices below sm_89, or a forced portable build)
// convert with it; bench/fp8_encode_check.cu compares it with the hardware conversion on
// all 2^32 inputs. How: |x| is clamped to max, then rounded to the FP8 spacing of its
// binade by FP32 arithmetic itself: with C = 2^(max(e, EMIN) + 23 - MB), every FP32 in
// [C, 2C) is a multiple of that spacing, so (|x| + C) - C is |x| rounded half to even to
// it (exact subtraction). The code is then read off the result's bits (normal) or its
// multiple of the subnormal spacing. (Run 45-46's integer version of the CPU reference's
// algorithm was bit-identical too, at ~22 instead of ~15 instructions.)
template <int FMT> MX_DEV mx_u32 mx_fp8_rn_sat_sw(float x) {
  constexpr int MB = MxFmt<FMT>::mbits;
  constexpr int EMIN = FMT == 0 ? -6 : -14;  // smallest normal exponent
  const mx_u32 bits = (mx_u32)__float_as_int(x);
  const mx_u32 sign = (bits >> 24) & 0x80u;
  const mx_u32 ab = bits & 0x7FFFFFFFu;
  const float a = fminf(__int_as_float((int)ab), MxFmt<FMT>::maxv);  // +Inf -> max (satfinite)
  const mx_u32 eb = max((mx_u32)__float_as_int(a) & 0x7F800000u, (mx_u32)(EMIN + 127) << 23);
  const float c = __int_as_float((int)(eb + ((mx_u32)(23 - MB) << 23)));
  const float r = __fsub_rn(__fadd_rn(a, c), c);
  const mx_u32 rb = (mx_u32)__float_as_int(r);
  const mx_u32 normal = (rb >> (23 - MB)) - ((mx_u32)(126 + EMIN) << MB);
  const mx_u32 sub = __float2uint_rz(r * __int_as_float((MB - EMIN + 127) << 23));
  const mx_u32 code = rb >= ((mx_u32)(EMIN + 127) << 23) ? normal : sub;
  return ab > 0x7F800000u ? 0x7Fu : (sign | code);
}

// Two FP32 -> packed FP8 (lo in bits 0..7, hi in 8..15): round to nearest even,
// saturating to +-max normal (satfinite), subnormals exact. The hardware conversion needs
// sm_89; older targets use the software one above (the same bytes).
template <int FMT> MX_DEV mx_u32 cvt_fp8x2(float lo, float hi);
#if __CUDA_ARCH__ >= 890
template <> MX_DEV mx_u32 cvt_fp8x2<0>(float lo, float hi) {
  mx_u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return (mx_u32)r;
}
template <> MX_DEV mx_u32 cvt_fp8x2<1>(float lo, float hi) {
  mx_u16 r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return (mx_u32)r;
}
#else
template <> MX_DEV mx_u32 cvt_fp8x2<0>(float lo, float hi) { return mx_fp8_rn_sat_sw<0>(lo) | (mx_fp8_rn_sat_sw<0>(hi) << 8); }
template <> MX_DEV mx_u32 cvt_fp8x2<1>(float lo, float hi) { return mx_fp8_rn_sat_sw<1>(lo) | (mx_fp8_rn_sat_sw<1>(hi) << 8); }
#endif

// Quantize 4 values with inverse scale inv (already 2^(127-b)); nonfinite block -> 0x7F.
template <int FMT> MX_DEV mx_u32 mx_quant4(float a, float b, float c, float d, float inv, bool nonfinite) {
  if (nonfinite) return 0x7F7F7F7Fu;
  mx_u32 lo = cvt_fp8x2<FMT>(a * inv, b * inv);
  mx_u32 hi = cvt_fp8x2<FMT>(c * inv, d * inv);
  return lo | (hi << 16);
}

MX_DEV mx_u32 abs_bits(float x) { return (mx_u32)__float_as_int(x) & 0x7FFFFFFFu; }
