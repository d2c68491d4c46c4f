// mx_quantize.cu — MX quantization kernels (1x32 rows, 32x1 columns written transposed
// and group-aware, 32x32 tiles with an optional transposed copy), and the E8M0 -> FP32
// scale relayout the GEMM consumes. NVRTC-clean; see README.md for launch rules.
#include "mx_ptx.cuh"
#include "mx_numerics.cuh"

#define MXQ_ROWS   1  // qa/sa: 1x32 blocks along C
#define MXQ_COLS   2  // qt/st: 32x1 blocks along R, written transposed [C][ldt]
#define MXQ_TILE   4  // qa/sa: 32x32 tiles
#define MXQ_TILE_T 8  // qt: 32x32 tiles, data written transposed [C][ldt]; st (if non-null) [CB][ldst]

struct MxQuantParams {
  const void* in;      // [batch][R][C] row-major, f32 or bf16
  mx_i64 in_bs;        // batch stride (elements)
  int R, C;
  int flags, mode;
  mx_u8* qa; mx_u8* sa; mx_i64 qa_bs, sa_bs;   // [R][C], ROWS: [R][ceil(C/32)], TILE: [ceil(R/32)][ceil(C/32)]
  mx_u8* qt; mx_u8* st; mx_i64 qt_bs, st_bs;   // [C][ldt], COLS: [C][ldst], TILE_T: [ceil(C/32)][ldst]
  int ldt, ldst;
  const int* offs;     // grouped rows (batch must be 1), or null
  int E;
  int grouped_tiles;   // grouped: Rp/32 (padded row tiles); ungrouped: 0
};

template <int IN_BF16>
MX_DEV void load8(const MxQuantParams& p, const void* base, int row, int col, bool rowok, float* v) {
  const int C = p.C;
  if (rowok && col + 8 <= C && (C & 7) == 0) {
    if (IN_BF16) {
      uint4 w = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const mx_u16*>(base) + (mx_i64)row * C + col));
      mx_u32 ww[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) { v[2*i] = bf16_bits_to_f32(ww[i] & 0xFFFF); v[2*i+1] = bf16_bits_to_f32(ww[i] >> 16); }
    } else {
      const float4* q = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(base) + (mx_i64)row * C + col);
      float4 a = __ldg(q), b = __ldg(q + 1);
      v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float x = 0.f;
      if (rowok && col + i < C) {
        if (IN_BF16) x = bf16_bits_to_f32(reinterpret_cast<const mx_u16*>(base)[(mx_i64)row * C + col + i]);
        else x = reinterpret_cast<const float*>(base)[(mx_i64)row * C + col + i];
      }
      v[i] = x;
    }
  }
}

// 16 consecutive bytes (4 words) to dst; vector store when aligned and complete.
MX_DEV void store16(mx_u8* dst, const mx_u32* w, int nvalid, bool aligned) {
  if (nvalid >= 16 && aligned) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    for (int i = 0; i < nvalid && i < 16; ++i) dst[i] = (mx_u8)(w[i >> 2] >> (8 * (i & 3)));
  }
}

#define XS(r, c) xs_[(r) * 141 + (c) + 4 * ((c) >> 5)]

// One CTA = 256 threads = a tile of 32 rows x 128 columns.
// grid: x = ceil(C/128), y = row tiles (see README), z = batch.
template <int IN_BF16, int FMT>
MX_DEV void mx_quant_tile(const MxQuantParams& p) {
  // 32 x 128 tile, row stride 141 words and +4 words per 32-column block: the row pass
  // (8 threads per row, one per 16-column half block), the column pass and the fill are
  // bank-conflict free except the fill (2-way); with the old [32][129] the row pass and
  // the fill were 4-way conflicted.
  __shared__ float xs_[32 * 141];
  __shared__ mx_u32 tile_amax[8][4];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];
  const int t = threadIdx.x;
  const int c0 = blockIdx.x * 128;
  const int ty = blockIdx.y;
  const int b = blockIdx.z;

  // ---- map the row tile ----
  int src0, nvalid, p0;         // first source row, valid rows, padded (transposed) row
  bool cols_ok = true;
  if (p.offs != nullptr) {
    if (t < 32) warp_group_tables(p.offs, p.E, 128, 128, g_start, g_pre);
    __syncthreads();
    if (ty < p.grouped_tiles) {
      p0 = ty * 32;
      int e = upper_idx(g_pre, p.E, p0);
      int local = p0 - g_pre[e];
      int m = g_start[e + 1] - g_start[e];
      src0 = g_start[e] + local;
      nvalid = min(max(m - local, 0), 32);
    } else {  // rows after offs[E-1]: row-wise outputs only
      src0 = g_start[p.E] + (ty - p.grouped_tiles) * 32;
      nvalid = min(32, p.R - src0);
      p0 = 0;
      cols_ok = false;
    }
  } else {
    src0 = ty * 32; p0 = src0;
    nvalid = min(32, p.R - src0);
  }
  if (nvalid < 0) nvalid = 0;

  const void* base = IN_BF16 ? (const void*)(reinterpret_cast<const mx_u16*>(p.in) + b * p.in_bs)
                             : (const void*)(reinterpret_cast<const float*>(p.in) + b * p.in_bs);
  // ---- load 32 x 128 into smem (zeros outside) ----
#pragma unroll
  for (int it = 0; it < 2; ++it) {
    int id = t + it * 256;
    int r = id >> 4, c8 = (id & 15) * 8;
    float v[8];
    load8<IN_BF16>(p, base, src0 + r, c0 + c8, r < nvalid, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) XS(r, c8 + i) = v[i];
  }
  __syncthreads();

  const int CB = (p.C + 31) >> 5;
  const int flags = p.flags;

  // ---- along C: ROWS (1x32) or TILE (32x32); thread = (row, 32-col block, half) ----
  if (flags & (MXQ_ROWS | MXQ_TILE)) {
    const int row = t >> 3, cb = (t >> 1) & 3, h = t & 1;
    const int cc = cb * 32 + h * 16;
    mx_u32 am = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) am = max(am, abs_bits(XS(row, cc + i)));
    am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
    if (flags & MXQ_TILE) {
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 8));
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 16));
      if ((t & 31) < 8 && (t & 1) == 0) tile_amax[t >> 5][cb] = am;
      __syncthreads();
      am = 0;
#pragma unroll
      for (int w = 0; w < 8; ++w) am = max(am, tile_amax[w][cb]);
    }
    const mx_u32 sb = mx_scale_byte<FMT>(am, p.mode);
    const float inv = mx_inv_scale(sb);
    const bool nf = sb == 0xFFu;
    mx_u32 w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      w[q] = mx_quant4<FMT>(XS(row, cc + 4*q), XS(row, cc + 4*q + 1), XS(row, cc + 4*q + 2), XS(row, cc + 4*q + 3), inv, nf);
    const int gcol = c0 + cc;
    if (row < nvalid && gcol < p.C) {
      mx_u8* dst = p.qa + b * p.qa_bs + (mx_i64)(src0 + row) * p.C + gcol;
      store16(dst, w, p.C - gcol, (p.C & 15) == 0);
    }
    const int gcb = (c0 >> 5) + cb;
    if (h == 0 && gcb < CB) {
      if (flags & MXQ_ROWS) {
        if (row < nvalid) p.sa[b * p.sa_bs + (mx_i64)(src0 + row) * CB + gcb] = (mx_u8)sb;
      } else if (row == 0 && nvalid > 0) {
        p.sa[b * p.sa_bs + (mx_i64)(src0 >> 5) * CB + gcb] = (mx_u8)sb;
      }
    }
  }

  // ---- along R, written transposed: COLS (32x1) or TILE_T; thread = (column, half) ----
  if ((flags & (MXQ_COLS | MXQ_TILE_T)) && cols_ok) {
    const int col = t >> 1, h = t & 1;
    const int gcol = c0 + col;
    mx_u32 am;
    if (flags & MXQ_TILE_T) {
      if (!(flags & MXQ_TILE)) {  // tile amax not computed above
        const int row = t >> 3, cb = (t >> 1) & 3, hh = t & 1;
        mx_u32 a2 = 0;
#pragma unroll
        for (int i = 0; i < 16; ++i) a2 = max(a2, abs_bits(XS(row, cb * 32 + hh * 16 + i)));
        a2 = max(a2, __shfl_xor_sync(0xffffffffu, a2, 1));
        a2 = max(a2, __shfl_xor_sync(0xffffffffu, a2, 8));
        a2 = max(a2, __shfl_xor_sync(0xffffffffu, a2, 16));
        if ((t & 31) < 8 && (t & 1) == 0) tile_amax[t >> 5][cb] = a2;
      }
      __syncthreads();
      am = 0;
#pragma unroll
      for (int w = 0; w < 8; ++w) am = max(am, tile_amax[w][col >> 5]);
    } else {
      am = 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) am = max(am, abs_bits(XS(h * 16 + i, col)));
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
    }
    const mx_u32 sb = mx_scale_byte<FMT>(am, p.mode);
    const float inv = mx_inv_scale(sb);
    const bool nf = sb == 0xFFu;
    mx_u32 w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      w[q] = mx_quant4<FMT>(XS(h*16 + 4*q, col), XS(h*16 + 4*q + 1, col), XS(h*16 + 4*q + 2, col), XS(h*16 + 4*q + 3, col), inv, nf);
    if (gcol < p.C) {
      // grouped/COLS: the whole 32-row padded block is written (zeros past nvalid);
      // ungrouped: rows up to min(32, R - p0).
      int lim = p.offs != nullptr ? 32 : nvalid;
      int nv = lim - h * 16;
      if (nv > 0) {
        mx_u8* dst = p.qt + b * p.qt_bs + (mx_i64)gcol * p.ldt + p0 + h * 16;
        store16(dst, w, nv, (p.ldt & 15) == 0);
      }
      if (h == 0 && p.st != nullptr) {
        if (flags & MXQ_TILE_T) {
          if ((col & 31) == 0) p.st[b * p.st_bs + (mx_i64)(gcol >> 5) * p.ldst + (p0 >> 5)] = (mx_u8)sb;
        } else {
          p.st[b * p.st_bs + (mx_i64)gcol * p.ldst + (p0 >> 5)] = (mx_u8)sb;
        }
      }
    }
  }
}

#define MXQ_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256) NAME(const MxQuantParams p) { mx_quant_tile<BF, F>(p); }
MXQ_INST(mx_quantize_f32_e4m3, 0, 0)
MXQ_INST(mx_quantize_bf16_e4m3, 1, 0)
MXQ_INST(mx_quantize_f32_e5m2, 0, 1)
MXQ_INST(mx_quantize_bf16_e5m2, 1, 1)

// E8M0 bytes -> FP32 scale table for the GEMM, with relayout and zero padding:
//   out[e*ose + (c/4)*ocg + r*osr + c%4] = (r < R && c < C) ? 2^(in[e*ise + r*isr + c*isc] - 127) : 0
// for r < Rp, c < Cp (Cp a multiple of 4). Row-major: ocg = 4; the GEMM's A-scale table
// is "stage-major": osr = 4, ocg = 4*Rp. grid: x = ceil(Rp*Cp/256), y = batch; block 256.
extern "C" __global__ void __launch_bounds__(256) mx_scales_to_f32(
    const mx_u8* __restrict__ in, mx_i64 ise, mx_i64 isr, mx_i64 isc,
    float* __restrict__ out, mx_i64 ose, mx_i64 osr, mx_i64 ocg, int R, int C, int Rp, int Cp) {
  mx_i64 i = (mx_i64)blockIdx.x * 256 + threadIdx.x;
  if (i >= (mx_i64)Rp * Cp) return;
  int r = (int)(i / Cp), c = (int)(i % Cp);
  int e = blockIdx.y;
  float v = 0.f;
  if (r < R && c < C) v = mx_e8m0_to_f32(in[e * ise + r * isr + c * isc]);
  out[e * ose + (mx_i64)(c >> 2) * ocg + r * osr + (c & 3)] = v;
}
