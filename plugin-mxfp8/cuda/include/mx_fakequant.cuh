// mx_fakequant.cuh — fake quantization along M (mx_fakequant_m32_*): the wgrad operand
// quantized in 32x1 blocks along rows and written back as its MX values in bf16.
// Requires mx_ptx.cuh, mx_numerics.cuh and mx_quant_values.cuh. NVRTC-clean.
#pragma once

// ============================================================================================
// Fake quantization along M (wgrad "dequantize to BF16" path): out = bf16(dequant(quant(x)))
// with 32x1 MX blocks along R described by a device table, bit-identical to the grouped COLS
// quantizer followed by mx_dequantize (bf16 output, mxd_bf16_rne).
//   blocks: nblocks pairs (row0, nrows), nrows in 1..32; each pair is one MX block of rows
//   row0 .. row0+nrows-1 (zero-padded to 32 for the amax). Rows not in any block are not
//   written. out may not alias inp. mode: 0 rceil, 1 floor, 2 even.
// Launch: block 128 threads, grid x = ceil(C/128), y = min(nblocks, 65535) (any y >= 1
// works: CTA y processes blocks y, y + gridDim.y, ...). No shared memory.
// Thread layout: warp w owns columns c0 + 32w .. +31; lane = 4*rg + cg holds columns
// c0 + 32w + 8cg .. +7 of rows rg, rg+8, rg+16, rg+24 (16-byte loads/stores along C when
// C % 8 == 0 and inp/out are 16-byte aligned; scalar otherwise). Column amax: reduce-scatter
// over the 8 row lanes (lane rg ends with column rg's amax), one scale byte per lane,
// all-gather of the 8 bytes. Fast path (warp-uniform: every scale byte in [thr, 253] or the
// column all zero, so the dequantized value is a normal FP32 with <= 4 significant bits, +-0
// or +-Inf (overflow), exact in bf16):
// fp8x2 -> f16x2 -> f32 (exact), times 2^(b-127), truncated to bf16. Otherwise each element
// takes the reference path (mx_dequantize's decode, E8M0 with 0xFF = NaN, RNE to bf16).
// ============================================================================================
struct MxFakeQuantParams {
  const void* inp;        // [R][C] f32 or bf16
  mx_u16* out;            // [R][C] bf16
  const int* blocks;      // [nblocks][2] = (row0, nrows)
  int R, C, mode, nblocks;
};

template <int IN_BF16> MX_DEV float mxfq_elem(const mx_u32* w, int i) {
  if (IN_BF16) return __int_as_float((int)((i & 1) ? (w[i >> 1] & 0xFFFF0000u) : (w[i >> 1] << 16)));
  return __int_as_float((int)w[i]);
}

// What mx_fakequant_m32 computes per column and per row, shared with the kernels that write
// the same values beside other outputs (mx_quant_rows_wv.cuh, mx_quant_block_form.cuh's WV):
// one copy of the arithmetic keeps them bit-identical.
// Fast path when every scale byte is in [THR, 253] (smallest non-zero FP8 x 2^(b-127) >= 2^-126)
// or its column is all zero.
template <int FMT> struct MxfqThr { static constexpr mx_u32 v = FMT == 0 ? 10u : 17u; };
template <int FMT> MX_DEV bool mxfq_fast_ok(mx_u32 sb, mx_u32 am) {
  return (sb >= MxfqThr<FMT>::v && sb <= 253u) || am == 0u;
}

// bf16 rows: lane 4 rg + cg's words of rows rg + 8 i (raw[i]) -> the amax bits (FP32) of column
// 8 cg + rg, a reduce-scatter over the 8 row lanes (xor 16, 8, 4); b0..b2 = the bits of rg.
// (mx_fakequant_m32 keeps its own copy inline: calling this changed its machine code.)
MX_DEV mx_u32 mxfq_col_amax_bf16(const mx_u32 (&raw)[4][4], int b0, int b1, int b2) {
  mx_u32 a[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    a[k] = mxq_max_u16x2(mxq_max_u16x2(raw[0][k] & 0x7FFF7FFFu, raw[1][k] & 0x7FFF7FFFu),
                         mxq_max_u16x2(raw[2][k] & 0x7FFF7FFFu, raw[3][k] & 0x7FFF7FFFu));
  mx_u32 k0 = b2 ? a[2] : a[0], k1 = b2 ? a[3] : a[1];
  const mx_u32 s0 = b2 ? a[0] : a[2], s1 = b2 ? a[1] : a[3];
  k0 = mxq_max_u16x2(k0, __shfl_xor_sync(0xffffffffu, s0, 16));
  k1 = mxq_max_u16x2(k1, __shfl_xor_sync(0xffffffffu, s1, 16));
  mx_u32 k = b1 ? k1 : k0;
  k = mxq_max_u16x2(k, __shfl_xor_sync(0xffffffffu, b1 ? k0 : k1, 8));
  k = mxq_max_u16x2(k, __shfl_xor_sync(0xffffffffu, k, 4));
  return b0 ? (k & 0xFFFF0000u) : (k << 16);
}

// The column's scale byte sb (lane 4 rg + cg: column 8 cg + rg) -> the 8 scale bytes of the
// lane's columns (slo: columns 0..3, shi: 4..7, a byte each) by an all-gather over the row
// lanes; returns whether the warp takes the fast path.
template <int FMT> MX_DEV bool mxfq_gather_scales(mx_u32 sb, mx_u32 am, int b0, int b1, int b2, mx_u32& slo, mx_u32& shi) {
  const mx_u32 x = __shfl_xor_sync(0xffffffffu, sb, 4);
  const mx_u32 pr = b0 ? (x | (sb << 8)) : (sb | (x << 8));
  const mx_u32 y = __shfl_xor_sync(0xffffffffu, pr, 8);
  const mx_u32 qd = b1 ? (y | (pr << 16)) : (pr | (y << 16));
  const mx_u32 z = __shfl_xor_sync(0xffffffffu, qd, 16);
  slo = b2 ? z : qd; shi = b2 ? qd : z;
  // (an all-zero column is exact on the fast path too: its elements dequantize to +-0)
  return __all_sync(0xffffffffu, mxfq_fast_ok<FMT>(sb, am));
}

// The fast path's factors 2^(127-b) and 2^(b-127) of the 8 columns.
MX_DEV void mxfq_factors8(mx_u32 slo, mx_u32 shi, float (&inv)[8], float (&sc)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const mx_u32 be = ((e < 4 ? slo : shi) >> (8 * (e & 3))) & 0xFFu;
    inv[e] = __int_as_float((int)((254u - be) << 23));
    sc[e] = __int_as_float((int)(be << 23));
  }
}

// 8 consecutive elements of a row (w: mxfq_elem's words) -> their MX values, 4 bf16x2 words.
// fast: mxfq_factors8's inv and sc (unread otherwise); else the reference path (rare: tiny
// scales, NaN/Inf blocks), mx_dequantize's decode.
template <int IN_BF16, int FMT>
MX_DEV void mxfq_values8(const mx_u32* w, mx_u32 slo, mx_u32 shi, bool fast, const float (&inv)[8], const float (&sc)[8],
                         mx_u32 (&o)[4]) {
  if (fast) {
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const mx_u32 q = cvt_fp8x2<FMT>(mxfq_elem<IN_BF16>(w, e) * inv[e], mxfq_elem<IN_BF16>(w, e + 1) * inv[e + 1]);
      float lo, hi;
      mxfq_fp8x2_to_f32<FMT>(q, lo, hi);
      o[e >> 1] = __byte_perm((mx_u32)__float_as_int(lo * sc[e]), (mx_u32)__float_as_int(hi * sc[e + 1]), 0x7632);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const mx_u32 ba = ((e < 4 ? slo : shi) >> (8 * (e & 3))) & 0xFFu;
      const mx_u32 bb = ((e < 4 ? slo : shi) >> (8 * ((e + 1) & 3))) & 0xFFu;
      mx_u32 q = cvt_fp8x2<FMT>(mxfq_elem<IN_BF16>(w, e) * mx_inv_scale(ba), mxfq_elem<IN_BF16>(w, e + 1) * mx_inv_scale(bb));
      if (ba == 0xFFu) q = (q & 0xFF00u) | 0x7Fu;
      if (bb == 0xFFu) q = (q & 0x00FFu) | 0x7F00u;
      const mx_u32 ra = mxfq_bf16_rne(mxfq_fp8_to_f32(q & 0xFFu, FMT) * mx_e8m0_to_f32(ba));
      const mx_u32 rb = mxfq_bf16_rne(mxfq_fp8_to_f32(q >> 8, FMT) * mx_e8m0_to_f32(bb));
      o[e >> 1] = ra | (rb << 16);
    }
  }
}

template <int IN_BF16, int FMT>
MX_DEV void mx_fakequant_m32(const MxFakeQuantParams& p) {
  constexpr int NW = IN_BF16 ? 4 : 8;  // input words per row (8 columns)
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int cg = lane & 3, rg = lane >> 2;
  const int b0 = rg & 1, b1 = (rg >> 1) & 1, b2 = rg >> 2;
  const int C = p.C;
  const int col = blockIdx.x * 128 + w * 32 + cg * 8;
  const bool vec = (C & 7) == 0 && (((unsigned long long)p.inp | (unsigned long long)p.out) & 15ull) == 0 && col < C;
  for (int blk = blockIdx.y; blk < p.nblocks; blk += gridDim.y) {
    const int row0 = __ldg(p.blocks + 2 * blk);
    int nv = __ldg(p.blocks + 2 * blk + 1);
    nv = min(min(nv, 32), p.R - row0);
    if (nv <= 0) continue;  // uniform over the CTA

    mx_u32 raw[4][NW];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = rg + 8 * i;
      const mx_i64 off = (mx_i64)(row0 + r) * C + col;
      if (r < nv && vec) {
        if (IN_BF16) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const mx_u16*>(p.inp) + off));
          raw[i][0] = v.x; raw[i][1] = v.y; raw[i][2] = v.z; raw[i][3] = v.w;
        } else {
          const uint4* q = reinterpret_cast<const uint4*>(reinterpret_cast<const float*>(p.inp) + off);
          const uint4 v = __ldg(q), u = __ldg(q + 1);
          raw[i][0] = v.x; raw[i][1] = v.y; raw[i][2] = v.z; raw[i][3] = v.w;
          raw[i][4 % NW] = u.x; raw[i][5 % NW] = u.y; raw[i][6 % NW] = u.z; raw[i][7 % NW] = u.w;
        }
      } else {
#pragma unroll
        for (int k = 0; k < NW; ++k) raw[i][k] = 0;
        if (r < nv) {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            if (col + e < C) {
              if (IN_BF16) raw[i][e >> 1] |= (mx_u32)reinterpret_cast<const mx_u16*>(p.inp)[off + e] << (16 * (e & 1));
              else raw[i][e % NW] = (mx_u32)__float_as_int(reinterpret_cast<const float*>(p.inp)[off + e]);
            }
          }
        }
      }
    }

    // ---- column amax: reduce-scatter over the 8 row lanes (xor 16, 8, 4) ----
    mx_u32 am;
    if (IN_BF16) {
      mx_u32 a[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        a[k] = mxq_max_u16x2(mxq_max_u16x2(raw[0][k] & 0x7FFF7FFFu, raw[1][k] & 0x7FFF7FFFu),
                             mxq_max_u16x2(raw[2][k] & 0x7FFF7FFFu, raw[3][k] & 0x7FFF7FFFu));
      mx_u32 k0 = b2 ? a[2] : a[0], k1 = b2 ? a[3] : a[1];
      const mx_u32 s0 = b2 ? a[0] : a[2], s1 = b2 ? a[1] : a[3];
      k0 = mxq_max_u16x2(k0, __shfl_xor_sync(0xffffffffu, s0, 16));
      k1 = mxq_max_u16x2(k1, __shfl_xor_sync(0xffffffffu, s1, 16));
      mx_u32 k = b1 ? k1 : k0;
      k = mxq_max_u16x2(k, __shfl_xor_sync(0xffffffffu, b1 ? k0 : k1, 8));
      k = mxq_max_u16x2(k, __shfl_xor_sync(0xffffffffu, k, 4));
      am = b0 ? (k & 0xFFFF0000u) : (k << 16);
    } else {
      mx_u32 a[8];
#pragma unroll
      for (int k = 0; k < 8; ++k)
        a[k] = max(max(raw[0][k] & 0x7FFFFFFFu, raw[1][k] & 0x7FFFFFFFu), max(raw[2][k] & 0x7FFFFFFFu, raw[3][k] & 0x7FFFFFFFu));
      mx_u32 h[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const mx_u32 s = b2 ? a[q] : a[q + 4];
        h[q] = max(b2 ? a[q + 4] : a[q], __shfl_xor_sync(0xffffffffu, s, 16));
      }
      mx_u32 g[2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const mx_u32 s = b1 ? h[q] : h[q + 2];
        g[q] = max(b1 ? h[q + 2] : h[q], __shfl_xor_sync(0xffffffffu, s, 8));
      }
      am = max(b0 ? g[1] : g[0], __shfl_xor_sync(0xffffffffu, b0 ? g[0] : g[1], 4));
    }
    const mx_u32 sb = mx_scale_byte<FMT, true>(am, p.mode);  // column 8cg + rg's scale byte
    mx_u32 slo, shi;
    const bool fast = mxfq_gather_scales<FMT>(sb, am, b0, b1, b2, slo, shi);
    float inv[8], sc[8];
    if (fast) mxfq_factors8(slo, shi, inv, sc);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = rg + 8 * i;
      mx_u32 o[4];
      mxfq_values8<IN_BF16, FMT>(raw[i], slo, shi, fast, inv, sc, o);
      if (r < nv) {
        const mx_i64 off = (mx_i64)(row0 + r) * C + col;
        if (vec) {
          *reinterpret_cast<uint4*>(p.out + off) = make_uint4(o[0], o[1], o[2], o[3]);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (col + e < C) p.out[off + e] = (mx_u16)(o[e >> 1] >> (16 * (e & 1)));
        }
      }
    }
  }
}
