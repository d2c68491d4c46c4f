// mx_quant_values.cuh — FP8 bytes and their block scale to the exact MX values in bf16
// (bit-identical to mx_dequantize.cu's bf16 output): what the fake quantizers and the
// kept-values quantizers write.
// Requires mx_ptx.cuh and mx_numerics.cuh. NVRTC-clean.
#pragma once

// Same as mx_dequantize.cu's mxd_fp8_to_f32 / mxd_bf16_rne (the reference path).
MX_DEV float mxfq_pow2(int k) { return __int_as_float((k + 127) << 23); }
MX_DEV float mxfq_fp8_to_f32(mx_u32 b, int fmt) {
  const mx_u32 m7 = b & 0x7Fu;
  float v;
  if (fmt == 0) {
    if (m7 == 0x7Fu) return __int_as_float(0x7FC00000);
    const int e = (int)(m7 >> 3), m = (int)(m7 & 7u);
    v = e ? (float)(8 + m) * mxfq_pow2(e - 10) : (float)m * mxfq_pow2(-9);
  } else {
    const int e = (int)(m7 >> 2), m = (int)(m7 & 3u);
    if (e == 31) return m ? __int_as_float(0x7FC00000) : ((b & 0x80u) ? __int_as_float(0xFF800000) : __int_as_float(0x7F800000));
    v = e ? (float)(4 + m) * mxfq_pow2(e - 17) : (float)m * mxfq_pow2(-16);
  }
  return (b & 0x80u) ? -v : v;
}
MX_DEV mx_u32 mxfq_bf16_rne(float f) {
  mx_u32 u = (mx_u32)__float_as_int(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return ((u >> 16) | 0x40u) & 0xFFFFu;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return u >> 16;
}

// Two FP8 bytes (bits 0..15) -> two exact FP32 values.
template <int FMT> MX_DEV void mxfq_fp8x2_to_f32(mx_u32 q, float& lo, float& hi) {
#if __CUDA_ARCH__ >= 890
  mx_u32 h2;
  const mx_u16 q16 = (mx_u16)q;
  if (FMT == 0) asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(q16));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h2) : "h"(q16));
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}\n" : "=f"(lo), "=f"(hi) : "r"(h2));
#else  // portable build: the reference decode (exact too)
  lo = mxfq_fp8_to_f32(q & 0xFFu, FMT);
  hi = mxfq_fp8_to_f32((q >> 8) & 0xFFu, FMT);
#endif
}

// Two quantized bytes (bits 0..15) with their block's scale byte sb -> their MX values as
// two bf16 (bits 0..15, 16..31), bit-identical to mx_dequantize's bf16 output. fast (sb in
// [THR, 253] or an all-zero block): the value is a normal FP32 with <= 4 significant bits, +-0
// or +-Inf, so fp8 -> f32 (exact) times 2^(sb-127), truncated to bf16, is exact.
template <int FMT> MX_DEV mx_u32 mxfq_bf16x2(mx_u32 q16, mx_u32 sb, bool fast) {
  if (fast) {
    float lo, hi;
    mxfq_fp8x2_to_f32<FMT>(q16, lo, hi);
    const float sc = __int_as_float((int)(sb << 23));
    return __byte_perm((mx_u32)__float_as_int(lo * sc), (mx_u32)__float_as_int(hi * sc), 0x7632);
  }
  const float sv = mx_e8m0_to_f32(sb);
  return mxfq_bf16_rne(mxfq_fp8_to_f32(q16 & 0xFFu, FMT) * sv) |
         (mxfq_bf16_rne(mxfq_fp8_to_f32((q16 >> 8) & 0xFFu, FMT) * sv) << 16);
}
