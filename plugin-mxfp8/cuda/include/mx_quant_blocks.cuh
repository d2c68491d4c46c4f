// mx_quant_blocks.cuh — what every MX quantizer shares: the layout flags and MxQuantParams,
// 16-byte loads and stores, one thread's chunks of a 32 x 128 tile (MxqG, MxqTile, MxqSmem),
// block amax, scale-and-convert of a chunk, 4x4 byte transposes.
// Requires mx_ptx.cuh and mx_numerics.cuh. NVRTC-clean.
#pragma once

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
  mx_u16* vals;        // TILE, bf16 input, C % 8 == 0 (mx_quantize_t32_*): also the MX values as bf16
                       // [R][C] beside qa (quantize with ABI 1.2 values), or null
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
    // not unrolled (registers), no dynamic register-array index (no local memory)
    const mx_u32 w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
#pragma unroll 1
    for (int i = 0; i < nvalid && i < 16; ++i) {
      const mx_u32 x = i < 8 ? (i < 4 ? w0 : w1) : (i < 12 ? w2 : w3);
      dst[i] = (mx_u8)(x >> (8 * (i & 3)));
    }
  }
}

template <int IN_BF16> struct MxqG {
  static constexpr int NCH = IN_BF16 ? 2 : 4;  // chunks per thread
  static constexpr int CW = IN_BF16 ? 8 : 4;   // elements per chunk (16 bytes of input)
  static constexpr int QW = CW / 4;            // output words per chunk
};

struct MxqTile { int src0, nvalid, p0; bool cols_ok; };

// Field order: what the 32x32 kernel's row-group loop never touches (the group tables,
// COLS's column tables) comes first, so that mx_quant_tile32 can lay its W^T line buffer
// over it (MXQ_LT_OFF).
struct MxqSmem {
  int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];
  __align__(16) mx_u32 colmax[8][128];   // COLS: per-warp column amax
  __align__(16) mx_u8 csb[128];          // COLS: scale byte per column
  __align__(16) mx_u32 tam[2][8][4];     // per-warp tile amax (double-buffered by iteration)
  mx_u32 bt[32 * 33];                    // quantized bytes [row][word], row stride 33 words
};
// MxqSmem's fields before `tam`, alone: its size (a multiple of its 16-byte alignment) is
// tam's offset. NVRTC has no offsetof; the nvcc build checks the two agree.
struct MxqSmemHead {
  int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];
  __align__(16) mx_u32 colmax[8][128];
  __align__(16) mx_u8 csb[128];
};
#ifndef __CUDACC_RTC__
static_assert(__builtin_offsetof(MxqSmem, tam) == sizeof(MxqSmemHead), "MxqSmemHead mirrors MxqSmem's head");
#endif

MX_DEV MxqTile mxq_map_tile(const MxQuantParams& p, const MxqSmem& s, int ty) {
  MxqTile t;
  t.cols_ok = true;
  if (p.offs != nullptr) {
    if (ty < p.grouped_tiles) {
      t.p0 = ty * 32;
      int e = upper_idx(s.g_pre, p.E, t.p0);
      int local = t.p0 - s.g_pre[e];
      int m = s.g_start[e + 1] - s.g_start[e];
      t.src0 = s.g_start[e] + local;
      t.nvalid = min(max(m - local, 0), 32);
    } else {  // rows after offs[E-1]: row-wise outputs only
      t.src0 = s.g_start[p.E] + (ty - p.grouped_tiles) * 32;
      t.nvalid = min(32, p.R - t.src0);
      t.p0 = 0;
      t.cols_ok = false;
    }
  } else {
    t.src0 = ty * 32; t.p0 = t.src0;
    t.nvalid = min(32, p.R - t.src0);
  }
  if (t.nvalid < 0) t.nvalid = 0;
  return t;
}

MX_DEV int mxq_chunk_col(int bf, int k, int j) { return bf ? 64 * k + 8 * j : 32 * k + 4 * j; }

// Elements col .. col+CW-1 of the row starting at element `row`, those below C, packed as
// mxq_load's words (bf16 in pairs, f32 as bits), zeros past C: scalar loads, for a chunk
// the 16-byte path cannot take (a row end with C % CW != 0).
template <int IN_BF16>
MX_DEV void mxq_gather(const void* base, mx_i64 row, int col, int C, mx_u32 (&w)[4]) {
  constexpr int CW = MxqG<IN_BF16>::CW;
  w[0] = w[1] = w[2] = w[3] = 0u;
#pragma unroll
  for (int i = 0; i < CW; ++i) {
    if (col + i < C) {
      if (IN_BF16) w[i >> 1] |= (mx_u32)reinterpret_cast<const mx_u16*>(base)[row + col + i] << (16 * (i & 1));
      else w[i] = (mx_u32)__float_as_int(reinterpret_cast<const float*>(base)[row + col + i]);
    }
  }
}

// Raw input bits of this thread's chunks (bf16 packed in pairs, f32 as bits), zeros outside.
// Row r of tile t as both loaders see it: its element offset (row 0 of the tile when r is
// past the valid rows, which are then not read), whether it exists, and whether whole
// 16-byte chunks can be read (C a multiple of the chunk width, so chunks are aligned).
struct MxqRow { mx_i64 row; bool ok, vec; };
template <int IN_BF16> MX_DEV MxqRow mxq_row(const MxQuantParams& p, const MxqTile& t, int r) {
  const bool ok = r < t.nvalid;
  return {(mx_i64)(t.src0 + (ok ? r : 0)) * p.C, ok, IN_BF16 ? (p.C & 7) == 0 : (p.C & 3) == 0};
}
template <int IN_BF16> MX_DEV const void* mxq_chunk_ptr(const void* base, mx_i64 row, int col) {
  return IN_BF16 ? (const void*)(reinterpret_cast<const mx_u16*>(base) + row + col)
                 : (const void*)(reinterpret_cast<const float*>(base) + row + col);
}

template <int IN_BF16>
MX_DEV void mxq_load(const MxQuantParams& p, const void* base, const MxqTile& t, int c0, int r, int j,
                     mx_u32 (&raw)[MxqG<IN_BF16>::NCH][4]) {
  constexpr int NCH = MxqG<IN_BF16>::NCH, CW = MxqG<IN_BF16>::CW;
  const int C = p.C;
  const MxqRow rw = mxq_row<IN_BF16>(p, t, r);
  const mx_i64 row = rw.row;
  const bool rowok = rw.ok;
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    const int col = c0 + mxq_chunk_col(IN_BF16, k, j);
    if (rowok && rw.vec && col + CW <= C) {
      uint4 v = __ldg(reinterpret_cast<const uint4*>(mxq_chunk_ptr<IN_BF16>(base, row, col)));
      raw[k][0] = v.x; raw[k][1] = v.y; raw[k][2] = v.z; raw[k][3] = v.w;
    } else {
      // tail / unaligned: scalar loads
      mxq_gather<IN_BF16>(base, row, rowok ? col : C, C, raw[k]);
    }
  }
}

// Ring variant of mxq_load (bf16 input, MXQ_ASYNC_STAGES > 0): this thread's chunks of
// tile t go to its own 16-byte slots at slot[k * 256] by cp.async, zero-filled outside the
// tensor, so several tiles are in flight without holding registers. A chunk the vector path
// cannot take (C % 8 != 0, at a row end) is gathered by mxq_gather and stored to the slot
// directly. Only this thread reads its slots: no barrier, cp_async_wait only.
template <int IN_BF16>
MX_DEV void mxq_issue(const MxQuantParams& p, const void* base, const MxqTile& t, int c0, int r, int j, uint4* slot) {
  constexpr int NCH = MxqG<IN_BF16>::NCH;
  const int C = p.C;
  const MxqRow rw = mxq_row<IN_BF16>(p, t, r);
  const mx_i64 row = rw.row;
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    const int col = c0 + mxq_chunk_col(IN_BF16, k, j);
    uint4* dst = slot + k * 256;
    if (!rw.ok || col >= C) {
      cp_async16(smem_u32(dst), base, 0);
    } else if (rw.vec) {  // C % CW == 0 and col % CW == 0: the whole chunk is inside
      cp_async16(smem_u32(dst), mxq_chunk_ptr<IN_BF16>(base, row, col), 16);
    } else {
      mx_u32 w[4];
      mxq_gather<IN_BF16>(base, row, col, C, w);
      *dst = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

template <int IN_BF16> MX_DEV float mxq_elem(const mx_u32 (&w)[4], int i) {
  if (IN_BF16) return __int_as_float((int)((i & 1) ? (w[i >> 1] & 0xFFFF0000u) : (w[i >> 1] << 16)));
  return __int_as_float((int)w[i]);
}

template <int IN_BF16> MX_DEV mx_u32 mxq_chunk_amax(const mx_u32 (&w)[4]) {
  mx_u32 a = 0;
  if (IN_BF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a = max(a, max((w[i] << 16) & 0x7FFF0000u, w[i] & 0x7FFF0000u));
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) a = max(a, w[i] & 0x7FFFFFFFu);
  }
  return a;
}

// Quantized words of one chunk with one scale byte.
template <int IN_BF16, int FMT> MX_DEV void mxq_quant_chunk(const mx_u32 (&w)[4], mx_u32 sb, mx_u32* out) {
  const float inv = mx_inv_scale(sb);
  const bool nf = sb == 0xFFu;
#pragma unroll
  for (int q = 0; q < MxqG<IN_BF16>::QW; ++q)
    out[q] = mx_quant4<FMT>(mxq_elem<IN_BF16>(w, 4 * q), mxq_elem<IN_BF16>(w, 4 * q + 1),
                            mxq_elem<IN_BF16>(w, 4 * q + 2), mxq_elem<IN_BF16>(w, 4 * q + 3), inv, nf);
}

// One byte per element with its own scale byte (COLS); same result as mx_quant4 per element.
template <int FMT> MX_DEV mx_u32 mxq_quant4_each(float a, float b, float c, float d, mx_u32 sa, mx_u32 sb, mx_u32 sc, mx_u32 sd) {
  mx_u32 lo = cvt_fp8x2<FMT>(a * mx_inv_scale(sa), b * mx_inv_scale(sb));
  mx_u32 hi = cvt_fp8x2<FMT>(c * mx_inv_scale(sc), d * mx_inv_scale(sd));
  const mx_u32 nf = (sa == 0xFFu ? 0xFFu : 0u) | (sb == 0xFFu ? 0xFF00u : 0u) | (sc == 0xFFu ? 0xFF0000u : 0u) |
                   (sd == 0xFFu ? 0xFF000000u : 0u);
  return ((lo | (hi << 16)) & ~nf) | (0x7F7F7F7Fu & nf);
}

MX_DEV mx_u32 mxq_max_u16x2(mx_u32 a, mx_u32 b) {
#if __CUDA_ARCH__ >= 900
  mx_u32 r;
  asm("max.u16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else  // portable build: the two halves separately
  const mx_u32 lo = max(a & 0xFFFFu, b & 0xFFFFu), hi = max(a >> 16, b >> 16);
  return lo | (hi << 16);
#endif
}

// 4 consecutive bytes (one word); vector store when aligned and complete.
MX_DEV void mxq_store4(mx_u8* dst, mx_u32 w, int nvalid, bool aligned) {
  if (nvalid >= 4 && aligned) {
    *reinterpret_cast<mx_u32*>(dst) = w;
  } else {
#pragma unroll 1
    for (int i = 0; i < nvalid && i < 4; ++i) dst[i] = (mx_u8)(w >> (8 * i));
  }
}

// out_c = column c of the 4x4 byte matrix whose row r is a[r] (byte c of a[r] = (r, c)).
MX_DEV void mxq_transpose4x4(mx_u32 a0, mx_u32 a1, mx_u32 a2, mx_u32 a3, mx_u32& o0, mx_u32& o1, mx_u32& o2, mx_u32& o3) {
  mx_u32 t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a0, a1, 0x7362);
  mx_u32 t2 = __byte_perm(a2, a3, 0x5140), t3 = __byte_perm(a2, a3, 0x7362);
  o0 = __byte_perm(t0, t2, 0x5410); o1 = __byte_perm(t0, t2, 0x7632);
  o2 = __byte_perm(t1, t3, 0x5410); o3 = __byte_perm(t1, t3, 0x7632);
}
