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

// ============================================================================================
// Quantizer (run 9): register-resident tiles, several row tiles per CTA, next tile prefetched.
//
// Launch contract (unchanged): block 256, grid x = ceil(C/128), z = batch; grid y = ANY value
// in 1 .. T, where T = ceil(R/32) (ungrouped) or grouped_tiles + (ROWS|TILE ?
// ceil((R - offs[E-1])/32) : 0) (grouped). CTA (x, y, z) processes the row tiles
// y, y + gridDim.y, y + 2*gridDim.y, ... < T; the global loads of the next tile are issued
// before the current tile is computed. grid y = T is the old one-tile-per-CTA launch;
// the host rule mxq_grid_y() below (and `fn quant` in the Rust backend) launches about
// MXQ_TILES_PER_CTA tiles per CTA. Output bytes do not depend on grid y.
//
// Thread layout inside a 32 x 128 tile: warp w holds rows 4w..4w+3, lane l holds row
// r = 4w + l/8 and, with j = l%8, NCH chunks of CW consecutive columns:
//   bf16: 2 chunks of 8 columns at 64k + 8j  (one 16-byte load each; 128 contiguous bytes
//         per row per load instruction), a 32-column block is shared by 4 lanes;
//   f32:  4 chunks of 4 columns at 32k + 4j  (one 16-byte load each), block shared by 8 lanes.
// ROWS: amax by shuffles, no shared memory; bf16 output is regrouped with one shuffle so
// that each lane stores 16 bytes (128 contiguous bytes per row per warp store); f32 lanes
// store 4 bytes (one full 32-byte sector per 8 lanes).
// TILE/TILE_T: per-warp shuffles + an [8][4] cross-warp table; the quantized bytes are
// computed once and, for TILE_T, transposed through a 4 KB byte tile (PRMT 4x4 transposes,
// 16-byte stores along the transposed rows).
// COLS: column amax over the warp's 4 rows by shuffles, an [8][128] cross-warp table, one
// scale per column, bytes transposed as for TILE_T.
// ============================================================================================
#ifndef MXQ_TILES_PER_CTA
#define MXQ_TILES_PER_CTA 4
#endif

template <int IN_BF16> struct MxqG {
  static constexpr int NCH = IN_BF16 ? 2 : 4;  // chunks per thread
  static constexpr int CW = IN_BF16 ? 8 : 4;   // elements per chunk (16 bytes of input)
  static constexpr int QW = CW / 4;            // output words per chunk
};

struct MxqTile { int src0, nvalid, p0; bool cols_ok; };

struct MxqSmem {
  int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];
  __align__(16) mx_u32 tam[2][8][4];     // per-warp tile amax (double-buffered by iteration)
  __align__(16) mx_u32 colmax[8][128];   // COLS: per-warp column amax
  __align__(16) mx_u8 csb[128];          // COLS: scale byte per column
  mx_u32 bt[32 * 33];                    // quantized bytes [row][word], row stride 33 words
};

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

template <int FMT> MX_DEV mx_u32 mxfq_bf16x2(mx_u32 q16, mx_u32 sb, bool fast);

template <int IN_BF16, int FMT, int MASK>
MX_DEV void mxq_process(const MxQuantParams& p, MxqSmem& s, const MxqTile& tl, int c0, int b, int par, int pflags,
                        const mx_u32 (&raw)[MxqG<IN_BF16>::NCH][4]) {
  constexpr int NCH = MxqG<IN_BF16>::NCH, QW = MxqG<IN_BF16>::QW;
  const int t = threadIdx.x, w = t >> 5, lane = t & 31;
  const int r = 4 * w + (lane >> 3), j = lane & 7;
  const int flags = pflags & MASK;
  const int C = p.C, CB = (C + 31) >> 5;
  const bool do_t = (flags & (MXQ_COLS | MXQ_TILE_T)) && tl.cols_ok;
  const bool need_tile = (flags & MXQ_TILE) || (do_t && (flags & MXQ_TILE_T));

  // ---- block amax along the row (1x32) ----
  mx_u32 am[NCH];
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    mx_u32 v = mxq_chunk_amax<IN_BF16>(raw[k]);
    v = max(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = max(v, __shfl_xor_sync(0xffffffffu, v, 2));
    if (!IN_BF16) v = max(v, __shfl_xor_sync(0xffffffffu, v, 4));
    am[k] = v;
  }
  // ---- 32x32 tile amax ----
  mx_u32 tb[NCH];   // tile scale byte per chunk
  mx_u32 tsb4 = 0;  // threads 0..3: tile scale byte of block t
  if (need_tile) {
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      mx_u32 v = am[k];
      v = max(v, __shfl_xor_sync(0xffffffffu, v, 8));
      v = max(v, __shfl_xor_sync(0xffffffffu, v, 16));
      const int blk = IN_BF16 ? 2 * k + (j >> 2) : k;
      if (lane < 8 && (lane & (IN_BF16 ? 3 : 7)) == 0) s.tam[par][w][blk] = v;
    }
    __syncthreads();
    // lane l reads warp l%8's amax of block l/8; lanes 8b..8b+7 reduce block b
    mx_u32 v = s.tam[par][lane & 7][lane >> 3];
    v = max(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = max(v, __shfl_xor_sync(0xffffffffu, v, 2));
    v = max(v, __shfl_xor_sync(0xffffffffu, v, 4));
    const mx_u32 vsb = mx_scale_byte<FMT, true>(v, p.mode);  // lane 8b: scale byte of block b
#pragma unroll
    for (int k = 0; k < NCH; ++k) tb[k] = __shfl_sync(0xffffffffu, vsb, 8 * (IN_BF16 ? 2 * k + (j >> 2) : k));
    tsb4 = __shfl_sync(0xffffffffu, vsb, 8 * (lane & 3));  // lanes 0..3: blocks 0..3
    if (t < 4) {
      const int gcb = (c0 >> 5) + t;
      if (gcb < CB) {
        if ((flags & MXQ_TILE) && tl.nvalid > 0)
          p.sa[b * p.sa_bs + (mx_i64)(tl.src0 >> 5) * CB + gcb] = (mx_u8)tsb4;
        if (do_t && (flags & MXQ_TILE_T) && p.st != nullptr)
          p.st[b * p.st_bs + (mx_i64)gcb * p.ldst + (tl.p0 >> 5)] = (mx_u8)tsb4;
      }
    }
  }

  // ---- row-major outputs: ROWS (1x32) or TILE (32x32) ----
  mx_u32 qtile[NCH][QW];  // tile-quantized words (reused by TILE_T)
  if (flags & (MXQ_ROWS | MXQ_TILE)) {
    mx_u32 sbk[NCH];
    mx_u32 q[NCH][QW];
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      sbk[k] = (flags & MXQ_TILE) ? tb[k] : mx_scale_byte<FMT, true>(am[k], p.mode);
      mxq_quant_chunk<IN_BF16, FMT>(raw[k], sbk[k], q[k]);
#pragma unroll
      for (int i = 0; i < QW; ++i) qtile[k][i] = q[k][i];
    }
    const bool rowok = r < tl.nvalid;
    mx_u8* qrow = p.qa + b * p.qa_bs + (mx_i64)(tl.src0 + (rowok ? r : 0)) * C;
    if (IN_BF16) {
      // lanes j, j^1 swap halves: even j stores columns 8j..8j+15 (chunk 0), odd j
      // stores 64 + 8(j-1) .. +15 (chunk 1): 16-byte stores.
      const bool odd = j & 1;
      mx_u32 s0 = odd ? q[0][0] : q[NCH - 1][0], s1 = odd ? q[0][1 % QW] : q[NCH - 1][1 % QW];
      mx_u32 r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
      mx_u32 o[4];
      if (odd) { o[0] = r0; o[1] = r1; o[2] = q[NCH - 1][0]; o[3] = q[NCH - 1][1 % QW]; }
      else     { o[0] = q[0][0]; o[1] = q[0][1 % QW]; o[2] = r0; o[3] = r1; }
      const int gcol = c0 + (odd ? 64 + 8 * (j - 1) : 8 * j);
      if (rowok && gcol < C) store16(qrow + gcol, o, C - gcol, (C & 15) == 0);
      if ((flags & MXQ_TILE) && p.vals != nullptr && rowok) {
        // The MX values (mx_fakequant_rows_*'s bytes), chunk k at column mxq_chunk_col: C % 8 == 0
        // (the t32 contract), so a chunk is whole and 16-byte aligned.
        constexpr mx_u32 THR = FMT == 0 ? 10u : 17u;
        mx_u16* vrow = p.vals + b * p.qa_bs + (mx_i64)(tl.src0 + r) * C;
#pragma unroll
        for (int k = 0; k < NCH; ++k) {
          const int vc = c0 + mxq_chunk_col(IN_BF16, k, j);
          const bool fast = sbk[k] >= THR && sbk[k] <= 253u;
          if (vc < C)
            *reinterpret_cast<uint4*>(vrow + vc) =
                make_uint4(mxfq_bf16x2<FMT>(q[k][0] & 0xFFFFu, sbk[k], fast), mxfq_bf16x2<FMT>(q[k][0] >> 16, sbk[k], fast),
                           mxfq_bf16x2<FMT>(q[k][QW - 1] & 0xFFFFu, sbk[k], fast),
                           mxfq_bf16x2<FMT>(q[k][QW - 1] >> 16, sbk[k], fast));
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < NCH; ++k) {
        const int gcol = c0 + mxq_chunk_col(IN_BF16, k, j);
        if (rowok && gcol < C) mxq_store4(qrow + gcol, q[k][0], C - gcol, (C & 3) == 0);
      }
    }
    if ((flags & MXQ_TILE) == 0 && rowok) {  // ROWS scales: one lane per (row, block)
#pragma unroll
      for (int k = 0; k < NCH; ++k) {
        if ((j & (IN_BF16 ? 3 : 7)) == 0) {
          const int gcb = (c0 >> 5) + (IN_BF16 ? 2 * k + (j >> 2) : k);
          if (gcb < CB) p.sa[b * p.sa_bs + (mx_i64)(tl.src0 + r) * CB + gcb] = (mx_u8)sbk[k];
        }
      }
    }
  }

  // ---- transposed outputs: COLS (32x1) or TILE_T (32x32) ----
  if (do_t) {
    mx_u32 qt_[NCH][QW];
    if (flags & MXQ_TILE_T) {
      if (flags & MXQ_TILE) {
#pragma unroll
        for (int k = 0; k < NCH; ++k)
#pragma unroll
          for (int i = 0; i < QW; ++i) qt_[k][i] = qtile[k][i];
      } else {
#pragma unroll
        for (int k = 0; k < NCH; ++k) mxq_quant_chunk<IN_BF16, FMT>(raw[k], tb[k], qt_[k]);
      }
    } else {
      // column amax over the warp's 4 rows (shuffles), then over the 8 warps (table);
      // each chunk's 4 (bf16: 8) column maxima are written as soon as they are reduced.
#pragma unroll
      for (int k = 0; k < NCH; ++k) {
        mx_u32 cm[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          mx_u32 v;
          if (IN_BF16) {
            v = raw[k][i] & 0x7FFF7FFFu;
            v = mxq_max_u16x2(v, __shfl_xor_sync(0xffffffffu, v, 8));
            v = mxq_max_u16x2(v, __shfl_xor_sync(0xffffffffu, v, 16));
          } else {
            v = raw[k][i] & 0x7FFFFFFFu;
            v = max(v, __shfl_xor_sync(0xffffffffu, v, 8));
            v = max(v, __shfl_xor_sync(0xffffffffu, v, 16));
          }
          cm[i] = v;
        }
        if (lane < 8) {
          const int col = mxq_chunk_col(IN_BF16, k, j);
          if (IN_BF16) {
            *reinterpret_cast<uint4*>(&s.colmax[w][col]) =
                make_uint4(cm[0] << 16, cm[0] & 0xFFFF0000u, cm[1] << 16, cm[1] & 0xFFFF0000u);
            *reinterpret_cast<uint4*>(&s.colmax[w][col + 4]) =
                make_uint4(cm[2] << 16, cm[2] & 0xFFFF0000u, cm[3] << 16, cm[3] & 0xFFFF0000u);
          } else {
            *reinterpret_cast<uint4*>(&s.colmax[w][col]) = make_uint4(cm[0], cm[1], cm[2], cm[3]);
          }
        }
      }
      __syncthreads();
      if (t < 128) {
        mx_u32 m = 0;
#pragma unroll
        for (int ww = 0; ww < 8; ++ww) m = max(m, s.colmax[ww][t]);
        const mx_u32 sb = mx_scale_byte<FMT, true>(m, p.mode);
        s.csb[t] = (mx_u8)sb;
        const int gcol = c0 + t;
        if (gcol < C && p.st != nullptr) p.st[b * p.st_bs + (mx_i64)gcol * p.ldst + (tl.p0 >> 5)] = (mx_u8)sb;
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < NCH; ++k) {
        const int col = mxq_chunk_col(IN_BF16, k, j);
#pragma unroll
        for (int q = 0; q < QW; ++q) {
          const mx_u32 sv = *reinterpret_cast<const mx_u32*>(&s.csb[col + 4 * q]);  // 4 scale bytes
          qt_[k][q] = mxq_quant4_each<FMT>(mxq_elem<IN_BF16>(raw[k], 4 * q), mxq_elem<IN_BF16>(raw[k], 4 * q + 1),
                                           mxq_elem<IN_BF16>(raw[k], 4 * q + 2), mxq_elem<IN_BF16>(raw[k], 4 * q + 3),
                                           sv & 0xFFu, (sv >> 8) & 0xFFu, (sv >> 16) & 0xFFu, sv >> 24);
        }
      }
    }
    // bytes -> [32][33-word] tile, then 64 threads each transpose 4 columns x 16 rows
#pragma unroll
    for (int k = 0; k < NCH; ++k)
#pragma unroll
      for (int q = 0; q < QW; ++q) s.bt[r * 33 + (mxq_chunk_col(IN_BF16, k, j) >> 2) + q] = qt_[k][q];
    __syncthreads();
    if (t < 128) {
      // thread (cw, h): columns 4cw..4cw+3, rows 8h..8h+7: two 4x4 byte transposes (PRMT),
      // 8-byte stores (4 lanes = one 32-byte sector of a transposed row); reads conflict-free.
      const int cw = t >> 2, h = t & 3;
      mx_u32 o[4][2];  // o[column][row group]
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        const int rr = 8 * h + 4 * g;
        mxq_transpose4x4(s.bt[rr * 33 + cw], s.bt[(rr + 1) * 33 + cw], s.bt[(rr + 2) * 33 + cw], s.bt[(rr + 3) * 33 + cw],
                         o[0][g], o[1][g], o[2][g], o[3][g]);
      }
      // grouped: the whole 32-row padded block is written (zeros past nvalid);
      // ungrouped: rows up to min(32, R - p0).
      const int lim = p.offs != nullptr ? 32 : tl.nvalid;
      const int nv = lim - h * 8;
      if (nv > 0) {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int gcol = c0 + 4 * cw + m;
          if (gcol < C) {
            mx_u8* dst = p.qt + b * p.qt_bs + (mx_i64)gcol * p.ldt + tl.p0 + h * 8;
            if (nv >= 8 && (p.ldt & 7) == 0) {
              *reinterpret_cast<uint2*>(dst) = make_uint2(o[m][0], o[m][1]);
            } else {
              const mx_u32 w0 = o[m][0], w1 = o[m][1];
#pragma unroll 1
              for (int i = 0; i < nv && i < 8; ++i) dst[i] = (mx_u8)((i < 4 ? w0 : w1) >> (8 * (i & 3)));
            }
          }
        }
      }
    }
  }
}

// Row tiles of this launch (see the contract above).
MX_DEV int mxq_num_tiles(const MxQuantParams& p, const MxqSmem& s) {
  if (p.offs == nullptr) return (p.R + 31) >> 5;
  int tail = (p.flags & (MXQ_ROWS | MXQ_TILE)) ? (max(p.R - s.g_start[p.E], 0) + 31) >> 5 : 0;
  return p.grouped_tiles + tail;
}

// The tile loop, specialised on the flags it can see (MASK) so that the register-only
// ROWS path does not pay for the registers of the transposing paths.
template <int IN_BF16, int FMT, int MASK>
MX_DEV void mxq_loop(const MxQuantParams& p, MxqSmem& s, int nt, int flags) {
  constexpr int NCH = MxqG<IN_BF16>::NCH;
  const int t = threadIdx.x;
  const int c0 = blockIdx.x * 128;
  const int b = blockIdx.z;
  int ty = blockIdx.y;
  const int r = 4 * (t >> 5) + ((t & 31) >> 3), j = t & 7;
  const void* base = IN_BF16 ? (const void*)(reinterpret_cast<const mx_u16*>(p.in) + b * p.in_bs)
                             : (const void*)(reinterpret_cast<const float*>(p.in) + b * p.in_bs);
  MxqTile tl = mxq_map_tile(p, s, ty);
  mx_u32 cur[NCH][4];
  mxq_load<IN_BF16>(p, base, tl, c0, r, j, cur);
  int par = 0;
  // f32 input on the COLS path: no register prefetch (16 more registers per thread would
  // spill); it relies on the 3 resident CTAs per SM instead.
  constexpr bool PF = IN_BF16 || MASK == MXQ_ROWS || MASK == (MXQ_ROWS | MXQ_TILE | MXQ_TILE_T);
  while (true) {
    const int nty = ty + (int)gridDim.y;
    MxqTile ntl;
    mx_u32 nxt[NCH][4];
    if (PF && nty < nt) {  // prefetch: issued before the current tile is computed
      ntl = mxq_map_tile(p, s, nty);
      mxq_load<IN_BF16>(p, base, ntl, c0, r, j, nxt);
    }
    mxq_process<IN_BF16, FMT, MASK>(p, s, tl, c0, b, par, flags, cur);
    if (nty >= nt) break;
    ty = nty; par ^= 1;
    if (PF) {
      tl = ntl;
#pragma unroll
      for (int k = 0; k < NCH; ++k)
#pragma unroll
        for (int i = 0; i < 4; ++i) cur[k][i] = nxt[k][i];
    } else {
      tl = mxq_map_tile(p, s, ty);
      mxq_load<IN_BF16>(p, base, tl, c0, r, j, cur);
    }
  }
}

// mxq_loop with an AS-slot cp.async ring instead of the one-tile register prefetch: tile i
// of this CTA lives in slot i % AS; while tile i is computed, tiles i+1 .. i+AS-1 are in
// flight (bf16: AS x 32 bytes per thread, AS x 8 KB per CTA). Same tiles, same mxq_process,
// same bytes out. A slot is refilled one iteration after it was read (the values it held
// were consumed by mxq_process in between), so the refill cannot overtake the read.
template <int IN_BF16, int FMT, int MASK, int AS>
MX_DEV void mxq_loop_ring(const MxQuantParams& p, MxqSmem& s, uint4* ring, int nt, int flags) {
  constexpr int NCH = MxqG<IN_BF16>::NCH;
  static_assert(AS >= 2, "a ring needs two slots");
  const int t = threadIdx.x;
  const int c0 = blockIdx.x * 128;
  const int b = blockIdx.z;
  const int G = (int)gridDim.y;
  int ty = blockIdx.y;
  const int r = 4 * (t >> 5) + ((t & 31) >> 3), j = t & 7;
  const void* base = IN_BF16 ? (const void*)(reinterpret_cast<const mx_u16*>(p.in) + b * p.in_bs)
                             : (const void*)(reinterpret_cast<const float*>(p.in) + b * p.in_bs);
  uint4* mine = ring + t;  // slot s, chunk k: mine[(s * NCH + k) * 256]
#pragma unroll
  for (int i = 0; i < AS - 1; ++i) {
    const int tyi = ty + i * G;
    if (tyi < nt) mxq_issue<IN_BF16>(p, base, mxq_map_tile(p, s, tyi), c0, r, j, mine + i * NCH * 256);
    cp_async_commit();  // one group per tile, empty past the end: the wait count stays AS - 1
  }
  int slot = 0, par = 0;
  while (true) {
    const int tyn = ty + (AS - 1) * G;
    const int sn = slot == 0 ? AS - 1 : slot - 1;
    if (tyn < nt) mxq_issue<IN_BF16>(p, base, mxq_map_tile(p, s, tyn), c0, r, j, mine + sn * NCH * 256);
    cp_async_commit();
    cp_async_wait<AS - 1>();  // tile ty (the oldest group) has landed
    mx_u32 cur[NCH][4];
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const uint4 v = mine[(slot * NCH + k) * 256];
      cur[k][0] = v.x; cur[k][1] = v.y; cur[k][2] = v.z; cur[k][3] = v.w;
    }
    mxq_process<IN_BF16, FMT, MASK>(p, s, mxq_map_tile(p, s, ty), c0, b, par, flags, cur);
    ty += G;
    if (ty >= nt) break;
    par ^= 1;
    slot = slot + 1 == AS ? 0 : slot + 1;
  }
  cp_async_wait<0>();  // only empty groups remain; a second loop starts with a clean count
}

// mx_quantize_t32_*: the 32x32 loop (TILE, TILE_T; grouped or not, batched) with its input
// through a ring of AS slots, each filled by ONE 2D TMA load (box 128 columns x 32 rows of
// bf16 = 8 KB, no swizzle: 256 bytes per row) from a map over all B * R rows, one mbarrier
// per slot. Why: the per-thread 16-byte cp.async of mxq_loop_ring made L2 serve every
// input sector twice (ncu, run 38: 2x the sectors, L2 fabric at 90 % with DRAM at 72 %);
// one bulk copy per 256-byte row read each sector once but ran 15 % slower (run 39: 32
// small copies per tile). Tile i of this CTA lives in slot i % AS; a slot is refilled
// after every thread has read it (mxq_process has a CTA barrier, the tile amax table,
// after the reads). Rows past the tile's valid rows (the next expert's or batch's rows,
// or zeros past the map) and columns past C are zeroed by the reader. Same tiles, same
// mxq_process, same bytes out as mx_quantize_*.
struct MxQuantTmaParams {
  MxTmap tm;        // bf16 [B * R][C], box {128, 32}, SWIZZLE_NONE, OOB zero fill
  MxQuantParams p;  // as for mx_quantize_*; flags within TILE | TILE_T; in_bs == R * C
};
static_assert(sizeof(MxQuantParams) == 128 && sizeof(MxQuantTmaParams) == 256,
              "QuantParams / QuantTmaParams in src/backend/cuda.rs hard-code these sizes");

template <int FMT, int AS>
MX_DEV void mxq_loop_tma(const MxQuantTmaParams& P, MxqSmem& s, mx_u8* slots, mx_u64* bars, int nt, int flags) {
  const MxQuantParams& p = P.p;
  constexpr int SLOT = 32 * 128 * 2;
  constexpr int MASK = MXQ_ROWS | MXQ_TILE | MXQ_TILE_T;
  const int t = threadIdx.x;
  const int c0 = blockIdx.x * 128;
  const int b = blockIdx.z;
  const int G = (int)gridDim.y;
  int ty = blockIdx.y;
  const int r = 4 * (t >> 5) + ((t & 31) >> 3), j = t & 7;
  auto issue = [&](int tyi, int sl) {
    const MxqTile ti = mxq_map_tile(p, s, tyi);
    fence_proxy_async_smem();  // the slot's last generic reads come before this async write
    mbar_arrive_expect_tx(&bars[sl], SLOT);
    tma_load_2d(smem_u32(slots + sl * SLOT), &P.tm, c0, b * p.R + ti.src0, &bars[sl]);
  };
  if (t == 0) {
#pragma unroll
    for (int i = 0; i < AS - 1; ++i)
      if (ty + i * G < nt) issue(ty + i * G, i);
  }
  int slot = 0, par = 0;
  mx_u32 phases = 0;  // bit s: parity of slot s's next completion
  while (true) {
    const int tyn = ty + (AS - 1) * G;
    const int sn = slot == 0 ? AS - 1 : slot - 1;  // read by every thread last iteration
    if (t == 0 && tyn < nt) issue(tyn, sn);
    const MxqTile tl = mxq_map_tile(p, s, ty);
    mbar_wait(&bars[slot], (phases >> slot) & 1u);
    phases ^= 1u << slot;
    const bool rowok = r < tl.nvalid;
    mx_u32 cur[2][4];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int cc = 64 * k + 8 * j;  // column within the tile (mxq_chunk_col for bf16)
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (rowok && c0 + cc < p.C) v = *reinterpret_cast<const uint4*>(slots + slot * SLOT + r * 256 + cc * 2);
      cur[k][0] = v.x; cur[k][1] = v.y; cur[k][2] = v.z; cur[k][3] = v.w;
    }
    mxq_process<1, FMT, MASK>(p, s, tl, c0, b, par, flags, cur);
    ty += G;
    if (ty >= nt) break;
    par ^= 1;
    slot = slot + 1 == AS ? 0 : slot + 1;
  }
}

// Kernel body of mx_quantize_t32_*: bf16 input, C % 8 == 0, in 16-byte aligned, batches
// contiguous (in_bs == R * C), flags within TILE | TILE_T. Launch contract and host rule
// as mx_quantize_* (4 tiles per CTA).
template <int FMT, int AS>
MX_DEV void mx_quant_tile32(const MxQuantTmaParams& P) {
  const MxQuantParams& p = P.p;
  __shared__ MxqSmem s;
  __shared__ __align__(128) mx_u8 slots[AS * 32 * 128 * 2];
  __shared__ __align__(8) mx_u64 bars[AS];
  if (threadIdx.x == 0) {
    for (int i = 0; i < AS; ++i) mbar_init(&bars[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    tma_prefetch_desc(&P.tm);
  }
  if (p.offs != nullptr && threadIdx.x >= 32 && threadIdx.x < 64) warp_group_tables(p.offs, p.E, 128, 128, s.g_start, s.g_pre);
  __syncthreads();
  const int nt = mxq_num_tiles(p, s);
  if ((int)blockIdx.y >= nt) return;
  mxq_loop_tma<FMT, AS>(P, s, slots, bars, nt, p.flags & (MXQ_TILE | MXQ_TILE_T));
}

// AS: cp.async ring slots (0: register prefetch, mxq_loop).
template <int IN_BF16, int FMT, int AS = 0>
MX_DEV void mx_quant_tile(const MxQuantParams& p) {
  __shared__ MxqSmem s;
  __shared__ __align__(16) uint4 ring[AS > 0 ? AS * MxqG<IN_BF16>::NCH * 256 : 1];
  if (p.offs != nullptr) {
    if (threadIdx.x < 32) warp_group_tables(p.offs, p.E, 128, 128, s.g_start, s.g_pre);
    __syncthreads();
  }
  const int nt = mxq_num_tiles(p, s);
  if ((int)blockIdx.y >= nt) return;
  const int flags = p.flags;
  // Each loop is instantiated at one call site only (ptxas allocates the kernel as a whole).
  const bool cols = (flags & MXQ_COLS) && !(flags & MXQ_TILE_T);  // with TILE_T, COLS is ignored (as before)
  const bool two = cols && (flags & MXQ_TILE);                      // TILE | COLS: two passes
  // The ring: on the 32x32 loop it ran 5-7 points of copy bandwidth above the register
  // prefetch, on ROWS and ROWS|COLS 3-6 points below (docs/perf.md run 36). ROWS takes it
  // anyway: with the register prefetch on both ROWS and COLS the kernel spills (ptxas, 64
  // registers), and ROWS runs here only when C % 32 != 0 (else the flat kernel takes it).
  if ((flags & ~MXQ_ROWS) == 0) {
    if (AS > 0) mxq_loop_ring<IN_BF16, FMT, MXQ_ROWS, (AS > 1 ? AS : 2)>(p, s, ring, nt, flags);
    else mxq_loop<IN_BF16, FMT, MXQ_ROWS>(p, s, nt, flags);                             // 1x32 rows
  } else {
    if (!cols || two) {                                                            // 32x32 (+T)
      if (AS > 0) mxq_loop_ring<IN_BF16, FMT, MXQ_ROWS | MXQ_TILE | MXQ_TILE_T, (AS > 1 ? AS : 2)>(p, s, ring, nt, flags);
      else mxq_loop<IN_BF16, FMT, MXQ_ROWS | MXQ_TILE | MXQ_TILE_T>(p, s, nt, flags);
    }
    if (cols) mxq_loop<IN_BF16, FMT, MXQ_ROWS | MXQ_COLS>(p, s, nt, two ? MXQ_COLS : flags);     // (rows +) cols
  }
}

// Host rule for grid y (tiles = T of the contract above): about tpc tiles per CTA, but
// never fewer than ~16 CTAs per SM worth of work when the tensor has them:
//   gy = max(ceil(tiles / tpc), min(tiles, ceil(16 * sms / (gx * gz))))
// tpc = 2 for TILE/TILE_T without the ring (f32 input; run 9: 80-82 % of copy at 2, 75-78 %
// at 4), MXQ_TILES_PER_CTA (4) otherwise (the ring's 3 slots want tiles to prefetch).
// Implemented by `fn quant` (plugin-mxfp8/src/backend/cuda.rs), mirrored by bench/launch.cu.

// bf16 input: 64 registers (4 CTAs = 1024 threads per SM); f32 input: 80 (3 CTAs): its
// 16-register tiles do not fit the transposing paths in 64 without spilling.
// bf16 input reads through an MXQ_ASYNC_STAGES-slot cp.async ring (mxq_loop_ring, 8 KB of
// shared memory per slot, static: 3 slots + MxqSmem = 41 KB, under the 48 KB static limit;
// 4 CTAs per SM use 165 KB); f32 input (16 KB per slot) keeps the register prefetch.
#ifndef MXQ_ASYNC_STAGES
#define MXQ_ASYNC_STAGES 3
#endif
#define MXQ_INST(NAME, BF, F, AS) \
  extern "C" __global__ void __launch_bounds__(256, (BF) ? 4 : 3) NAME(const MxQuantParams p) { mx_quant_tile<BF, F, AS>(p); }
MXQ_INST(mx_quantize_f32_e4m3, 0, 0, 0)
MXQ_INST(mx_quantize_bf16_e4m3, 1, 0, MXQ_ASYNC_STAGES)
MXQ_INST(mx_quantize_f32_e5m2, 0, 1, 0)
MXQ_INST(mx_quantize_bf16_e5m2, 1, 1, MXQ_ASYNC_STAGES)
// 32x32 tiles from bf16 rows through a TMA ring (see mx_quant_tile32), 3 slots.
#define MXQ_INST_T32(NAME, F) \
  extern "C" __global__ void __launch_bounds__(256, 4) NAME(const __grid_constant__ MxQuantTmaParams p) { mx_quant_tile32<F, MXQ_ASYNC_STAGES>(p); }
// TMA and the transaction-count mbarrier need sm_90: a portable build (devices other than
// Hopper, kernels.rs) has no mx_quantize_t32_* and the backend never asks for them there.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
MXQ_INST_T32(mx_quantize_t32_bf16_e4m3, 0)
MXQ_INST_T32(mx_quantize_t32_bf16_e5m2, 1)
#endif
#ifdef MXQ_INSTANTIATE_SYNC  // bench/launch.cu (A/B): variant 11 mx_quantize_t32_* at 5 CTAs/SM
// (<= 48 registers), 7 the tiled kernel with the register prefetch only, 8 its 2-slot ring
extern "C" __global__ void __launch_bounds__(256, 5) mx_quantize_t32o_bf16_e4m3(const __grid_constant__ MxQuantTmaParams p) {
  mx_quant_tile32<0, MXQ_ASYNC_STAGES>(p);
}
MXQ_INST(mx_quantize_bf16_e4m3_sync, 1, 0, 0)
MXQ_INST(mx_quantize_bf16_e5m2_sync, 1, 1, 0)
MXQ_INST(mx_quantize_bf16_e4m3_as2, 1, 0, 2)
MXQ_INST(mx_quantize_bf16_e5m2_as2, 1, 1, 2)
#endif

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

// ============================================================================================
// Flat 1x32 quantizer (ROWS only, C % 32 == 0): the row-major input is then one contiguous
// run of 32-element blocks, block b = elements 32b .. 32b+31 and scale byte b, so rows
// and columns do not matter. Same bytes as mx_quantize_* with MXQ_ROWS (same helpers).
// Why a second kernel: the tiled one reads 256 contiguous bytes per row per CTA (bf16)
// and holds 32 bytes per thread in flight; it ran at 77-85 % of copy bandwidth (docs/
// perf.md runs 9, 15). Here a warp reads 512 contiguous bytes per load and every thread
// has MXQF_U 16-byte loads in flight (64 bytes), as the fake quantizer (86-95 %) does.
// Thread layout: 16-byte chunk c (bf16: 8 elements, 4 chunks per block; f32: 4 elements,
// 8 per block) goes to global thread c % (grid threads); a thread takes its MXQF_U chunks
// c, c + S, ..., c + (MXQF_U-1)S (S = grid threads, a multiple of 32) in one round, then
// advances by MXQF_U * S. The lanes of one block are consecutive and aligned, so a block is
// wholly inside or outside the tensor and its amax is 2 (bf16) or 3 (f32) xor-shuffles.
// Requires: in 16-byte aligned, q 8-byte (bf16) / 4-byte (f32) aligned. nblocks = R*C/32.
// Launch: block 256, any grid x >= 1 (host rule: the fewest grid-stride rounds that at most
// MXQF_CTAS_PER_SM CTAs per SM allow, then the fewest CTAs that do them; quant_flat_grid in
// src/backend/cuda.rs, mx_quant_flat_grid in bench/launch.cu).
// ============================================================================================
#define MXQF_U 4
#ifndef MXQF_CTAS_PER_SM
#define MXQF_CTAS_PER_SM 4
#endif
struct MxQuantFlatParams {
  const void* in;   // nblocks * 32 elements, f32 or bf16
  mx_u8* q;         // nblocks * 32 bytes
  mx_u8* s;         // nblocks scale bytes
  mx_i64 nblocks;
  int mode;
};
static_assert(sizeof(MxQuantFlatParams) == 40, "QuantFlatParams in src/backend/cuda.rs hard-codes 40 bytes");

// U: 16-byte loads in flight per thread; CS: streaming cache hints (ld.global.cs /
// st.global.cs: evict-first in L2) instead of the read-only path and plain stores;
// PF (harness A/B): the next round's loads are issued before this round is computed.
// CS: 0 = read-only path (ld.global.nc), 1 = streaming (ld.global.cs), 2 = plain ld.global
// (harness A/B).
template <int CS> MX_DEV uint4 mxqf_load1(const uint4* in, mx_i64 c, mx_i64 nchunks) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (c < nchunks) v = CS == 1 ? __ldcs(in + c) : CS == 2 ? in[c] : __ldg(in + c);
  return v;
}
MX_DEV void mxqf_set(mx_u32 (&w)[4], uint4 v) { w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w; }

// One 16-byte chunk c of the flat layout: the block amax by xor-shuffles (every lane of
// the warp must call this: the lanes of a block are consecutive and aligned), then, for
// c < nchunks, the chunk's FP8 bytes at p.q (FAKE: its MX values as bf16) and, from the
// block's first lane, the scale byte. Shared by the LDG-fed and the bulk-copy-fed kernels.
// FAKE 2: both, the FP8 bytes and scale at p.q / p.s and the MX values as bf16 at vals.
// NOSC (harness diagnostic, wrong output): the scale bytes are not stored.
template <int IN_BF16, int FMT, int CS, int FAKE, int NOSC = 0>
MX_DEV void mxqf_chunk(const MxQuantFlatParams& p, const mx_u32 (&raw)[4], mx_i64 c, mx_i64 nchunks, int lane,
                       mx_u16* vals = nullptr) {
  constexpr int CPB = IN_BF16 ? 4 : 8;  // chunks per block
  constexpr int QW = MxqG<IN_BF16>::QW;
  mx_u32 am = mxq_chunk_amax<IN_BF16>(raw);
  am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
  am = max(am, __shfl_xor_sync(0xffffffffu, am, 2));
  if (!IN_BF16) am = max(am, __shfl_xor_sync(0xffffffffu, am, 4));
  if (c >= nchunks) return;
  const mx_u32 sb = mx_scale_byte<FMT, true>(am, p.mode);
  mx_u32 q[QW];
  mxq_quant_chunk<IN_BF16, FMT>(raw, sb, q);
  if (FAKE) {
    // mx_fakequant_rows_*: the chunk's MX values as bf16 at p.q (2 bytes per element)
    constexpr mx_u32 THR = FMT == 0 ? 10u : 17u;
    const bool fast = (sb >= THR && sb <= 253u) || am == 0u;
    mx_u16* out = FAKE == 1 ? reinterpret_cast<mx_u16*>(p.q) : vals;
    if (IN_BF16) {
      *reinterpret_cast<uint4*>(out + 8 * c) =
          make_uint4(mxfq_bf16x2<FMT>(q[0] & 0xFFFFu, sb, fast), mxfq_bf16x2<FMT>(q[0] >> 16, sb, fast),
                     mxfq_bf16x2<FMT>(q[QW - 1] & 0xFFFFu, sb, fast), mxfq_bf16x2<FMT>(q[QW - 1] >> 16, sb, fast));
    } else {
      *reinterpret_cast<uint2*>(out + 4 * c) =
          make_uint2(mxfq_bf16x2<FMT>(q[0] & 0xFFFFu, sb, fast), mxfq_bf16x2<FMT>(q[0] >> 16, sb, fast));
    }
    if (FAKE == 1) return;
  }
  if (IN_BF16) {
    uint2* dst = reinterpret_cast<uint2*>(p.q + 8 * c);
    if (CS == 1) __stcs(dst, make_uint2(q[0], q[QW - 1])); else *dst = make_uint2(q[0], q[QW - 1]);
  } else {
    unsigned int* dst = reinterpret_cast<unsigned int*>(p.q + 4 * c);
    if (CS == 1) __stcs(dst, q[0]); else *dst = q[0];
  }
  if (!NOSC && (lane & (CPB - 1)) == 0) p.s[c / CPB] = (mx_u8)sb;
}

template <int IN_BF16, int FMT, int U, int CS, int PF, int FAKE = 0, int NOSC = 0>
MX_DEV void mx_quant_flat(const MxQuantFlatParams& p, mx_u16* vals = nullptr) {
  constexpr int CPB = IN_BF16 ? 4 : 8;  // chunks per block
  const mx_i64 nchunks = p.nblocks * CPB;
  const mx_i64 stride = (mx_i64)gridDim.x * blockDim.x;
  const int lane = threadIdx.x & 31;
  const uint4* in = reinterpret_cast<const uint4*>(p.in);
  mx_u32 raw[U][4], nxt[PF ? U : 1][4];
  // c0 - lane is the warp's first chunk: the loop condition is warp-uniform (shuffles).
  mx_i64 c0 = (mx_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (PF && c0 - lane < nchunks) {
#pragma unroll
    for (int u = 0; u < U; ++u) mxqf_set(raw[u], mxqf_load1<CS>(in, c0 + u * stride, nchunks));
  }
  for (; c0 - lane < nchunks; c0 += U * stride) {
    if (PF) {
      if (c0 + U * stride - lane < nchunks) {
#pragma unroll
        for (int u = 0; u < U; ++u) mxqf_set(nxt[PF ? u : 0], mxqf_load1<CS>(in, c0 + (U + u) * stride, nchunks));
      }
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) mxqf_set(raw[u], mxqf_load1<CS>(in, c0 + u * stride, nchunks));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) mxqf_chunk<IN_BF16, FMT, CS, FAKE, NOSC>(p, raw[u], c0 + u * stride, nchunks, lane, vals);
    if (PF) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < 4; ++i) raw[u][i] = nxt[PF ? u : 0][i];
    }
  }
}

// Harness A/B (MXQF_INSTANTIATE_VARIANTS, variant 17, bf16 input only): the flat kernel with
// each thread owning two adjacent chunks (32 input bytes, one 16-byte store of FP8 bytes)
// instead of one (an 8-byte store), as a copy kernel stores; a block is two lanes.
template <int FMT, int U>
MX_DEV void mx_quant_flat_pairs(const MxQuantFlatParams& p) {
  const mx_i64 npairs = p.nblocks * 2;  // bf16: 4 chunks = 2 pairs per block
  const mx_i64 stride = (mx_i64)gridDim.x * blockDim.x;
  const int lane = threadIdx.x & 31;
  const uint4* in = reinterpret_cast<const uint4*>(p.in);
  for (mx_i64 c0 = (mx_i64)blockIdx.x * blockDim.x + threadIdx.x; c0 - lane < npairs; c0 += U * stride) {
    mx_u32 raw[U][2][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const mx_i64 c = c0 + u * stride;
      mxqf_set(raw[u][0], mxqf_load1<0>(in, 2 * c, 2 * npairs));
      mxqf_set(raw[u][1], mxqf_load1<0>(in, 2 * c + 1, 2 * npairs));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const mx_i64 c = c0 + u * stride;
      mx_u32 am = max(mxq_chunk_amax<1>(raw[u][0]), mxq_chunk_amax<1>(raw[u][1]));
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
      if (c >= npairs) continue;
      const mx_u32 sb = mx_scale_byte<FMT, true>(am, p.mode);
      mx_u32 q0[2], q1[2];
      mxq_quant_chunk<1, FMT>(raw[u][0], sb, q0);
      mxq_quant_chunk<1, FMT>(raw[u][1], sb, q1);
      *reinterpret_cast<uint4*>(p.q + 16 * c) = make_uint4(q0[0], q0[1], q1[0], q1[1]);
      if ((lane & 1) == 0) p.s[c / 2] = (mx_u8)sb;
    }
  }
}

// ============================================================================================
// The flat 1x32 quantizer fed by bulk copies (mx_quantize_rows_bulk_*, mx_fakequant_rows_bulk_*;
// sm_90): the same blocks, the same per-chunk code (mxqf_chunk) and the same bytes out as
// mx_quantize_rows_* / mx_fakequant_rows_*; only how the input reaches the threads differs.
// Why it was tried: under the timing protocol's L2 flush (do_bench zeroes 256 MB before every
// call, which leaves the L2 full of dirty lines) the LDG-fed kernel took 7-11 µs longer on a
// 203 MB tensor than after a read-only flush, a copy of the same bytes 3 µs, and the 32x32
// quantizer, whose input comes by TMA, 3 µs (docs/perf.md run 59). It did not help: 2-8 %
// slower than the LDG-fed kernel under every flush (run 60), so it stays in the harness.
// Layout: the input is cut into slabs of MXQB_SLAB bytes (the last one shorter); CTA i takes
// slabs i, i + G, ... (G = grid size). A ring of AS slots in static shared memory, one bulk
// copy per slab, per slot a full mbarrier (transaction bytes) and an empty one (one arrival
// per warp once it has read its chunks); thread 0 refills the slot read in the previous
// iteration, so AS - 1 slabs are in flight while one is computed. Thread t takes chunks t and
// t + 256 of its slab (a warp reads 512 contiguous bytes of shared memory: no bank conflict).
// Requires: in 16-byte aligned (bulk copies), q as mx_quantize_rows_*.
// Launch: block 256, any grid x >= 1 (host rule: the fewest slab rounds that at most
// MXQB_CTAS_PER_SM CTAs per SM allow, then the fewest CTAs that do them; a round = one slab).
// ============================================================================================
#define MXQB_SLAB 8192
#define MXQB_AS 4
#ifndef MXQB_CTAS_PER_SM
#define MXQB_CTAS_PER_SM 4
#endif
template <int IN_BF16, int FMT, int AS, int FAKE>
MX_DEV void mx_quant_flat_bulk(const MxQuantFlatParams& p) {
  constexpr int CPB = IN_BF16 ? 4 : 8;  // chunks per block
  constexpr int CPS = MXQB_SLAB / 16;   // chunks per slab
  constexpr int U = CPS / 256;          // chunks per thread per slab
  __shared__ __align__(128) uint4 slots[AS][CPS];
  __shared__ __align__(8) mx_u64 full[AS], empty[AS];
  const mx_i64 nchunks = p.nblocks * CPB;
  const mx_i64 nslabs = (nchunks + CPS - 1) / CPS;
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) {
    for (int s = 0; s < AS; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], 8); }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const mx_u8* in = reinterpret_cast<const mx_u8*>(p.in);
  const mx_i64 G = gridDim.x;
  auto issue = [&](mx_i64 slab, int s) {
    const mx_i64 c0 = slab * CPS;
    const mx_u32 bytes = (mx_u32)(min((mx_i64)CPS, nchunks - c0) * 16);
    mbar_arrive_expect_tx(&full[s], bytes);
    bulk_load(smem_u32(&slots[s][0]), in + c0 * 16, bytes, &full[s]);
  };
  mx_i64 slab = blockIdx.x;
  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < AS; ++i)
      if (slab + i * G < nslabs) issue(slab + i * G, i);
  }
  for (int i = 0; slab < nslabs; ++i, slab += G) {
    const int s = i % AS;
    if (tid == 0 && i > 0) {
      const mx_i64 next = slab + (AS - 1) * G;  // the slab of iteration i - 1 + AS
      if (next < nslabs) {
        const int sp = (i - 1) % AS;
        mbar_wait(&empty[sp], ((i - 1) / AS) & 1);
        fence_proxy_async_smem();  // the slot's generic reads come before the async write
        issue(next, sp);
      }
    }
    mbar_wait(&full[s], (i / AS) & 1);
    const mx_i64 c0 = slab * CPS;
    mx_u32 raw[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (c0 + u * 256 + tid < nchunks) v = slots[s][u * 256 + tid];
      mxqf_set(raw[u], v);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
#pragma unroll
    for (int u = 0; u < U; ++u) mxqf_chunk<IN_BF16, FMT, 0, FAKE>(p, raw[u], c0 + u * 256 + tid, nchunks, lane);
  }
}

// The grid is at most MXQF_CTAS_PER_SM CTAs per SM, all resident at once (launch bounds):
// a grid larger than what fits ran a second partial wave of CTAs that each did a full
// share of the grid-stride loop (run 28: 8 CTAs/SM, 5 resident, 80 % vs 83 % of copy).
#define MXQF_INST(NAME, BF, F, U, CS, PF) \
  extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) NAME(const MxQuantFlatParams p) { mx_quant_flat<BF, F, U, CS, PF>(p); }
MXQF_INST(mx_quantize_rows_f32_e4m3, 0, 0, MXQF_U, 0, 0)
MXQF_INST(mx_quantize_rows_bf16_e4m3, 1, 0, MXQF_U, 0, 0)
MXQF_INST(mx_quantize_rows_f32_e5m2, 0, 1, MXQF_U, 0, 0)
MXQF_INST(mx_quantize_rows_bf16_e5m2, 1, 1, MXQF_U, 0, 0)
// Fake quantization along rows (the dequantize-to-BF16 forward/dgrad path with a dense
// operand): the same blocks and bytes as mx_quantize_rows_*, written as their MX values in
// bf16 at p.q (nblocks * 32 bf16; p.s unused, may be null), bit-identical to
// mx_quantize_rows_* followed by mx_dequantize with bf16 output. One pass instead of two.
#define MXQFF_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) NAME(const MxQuantFlatParams p) { mx_quant_flat<BF, F, MXQF_U, 0, 0, 1>(p); }
MXQFF_INST(mx_fakequant_rows_f32_e4m3, 0, 0)
MXQFF_INST(mx_fakequant_rows_bf16_e4m3, 1, 0)
MXQFF_INST(mx_fakequant_rows_f32_e5m2, 0, 1)
MXQFF_INST(mx_fakequant_rows_bf16_e5m2, 1, 1)
// Both in one pass (quantize with ABI 1.2 `values`): the FP8 bytes and scales of
// mx_quantize_rows_* and, at vals, the MX values of mx_fakequant_rows_* (nblocks * 32 bf16,
// 16-byte aligned). The values serve the GEMMs that run on the BF16 tensor cores without
// a dequantization pass per call.
struct MxQuantFlatValsParams {
  MxQuantFlatParams p;
  mx_u16* vals;
};
static_assert(sizeof(MxQuantFlatValsParams) == 48, "QuantFlatValsParams in src/backend/cuda.rs hard-codes 48 bytes");
#define MXQFV_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) NAME(const MxQuantFlatValsParams p) { mx_quant_flat<BF, F, MXQF_U, 0, 0, 2>(p.p, p.vals); }
MXQFV_INST(mx_quantize_rows_vals_f32_e4m3, 0, 0)
MXQFV_INST(mx_quantize_rows_vals_bf16_e4m3, 1, 0)
MXQFV_INST(mx_quantize_rows_vals_f32_e5m2, 0, 1)
MXQFV_INST(mx_quantize_rows_vals_bf16_e5m2, 1, 1)
// The bulk-copy-fed flat kernels (mx_quant_flat_bulk), HARNESS ONLY: 2-8 % slower than the
// LDG-fed ones under both flushes on every anchor shape (docs/perf.md run 60).
#define MXQB_INST(NAME, BF, F, AS, FAKE) \
  extern "C" __global__ void __launch_bounds__(256, MXQB_CTAS_PER_SM) NAME(const MxQuantFlatParams p) { mx_quant_flat_bulk<BF, F, AS, FAKE>(p); }
#if defined(MXQF_INSTANTIATE_VARIANTS) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900)
MXQB_INST(mx_quantize_rows_bulk_f32_e4m3, 0, 0, MXQB_AS, 0)
MXQB_INST(mx_quantize_rows_bulk_bf16_e4m3, 1, 0, MXQB_AS, 0)
MXQB_INST(mx_quantize_rows_bulk_f32_e5m2, 0, 1, MXQB_AS, 0)
MXQB_INST(mx_quantize_rows_bulk_bf16_e5m2, 1, 1, MXQB_AS, 0)
MXQB_INST(mx_fakequant_rows_bulk_f32_e4m3, 0, 0, MXQB_AS, 1)
MXQB_INST(mx_fakequant_rows_bulk_bf16_e4m3, 1, 0, MXQB_AS, 1)
MXQB_INST(mx_fakequant_rows_bulk_f32_e5m2, 0, 1, MXQB_AS, 1)
MXQB_INST(mx_fakequant_rows_bulk_bf16_e5m2, 1, 1, MXQB_AS, 1)
// ring depth 3 and 5
MXQB_INST(mx_quantize_rows_bulk3_bf16_e4m3, 1, 0, 3, 0)
MXQB_INST(mx_quantize_rows_bulk5_bf16_e4m3, 1, 0, 5, 0)
MXQB_INST(mx_quantize_rows_bulk3_f32_e4m3, 0, 0, 3, 0)
MXQB_INST(mx_quantize_rows_bulk5_f32_e4m3, 0, 0, 5, 0)
#endif
#ifdef MXQF_INSTANTIATE_VARIANTS  // harness A/B only (bench/launch.cu)
MXQF_INST(mx_quantize_rows_u8_bf16_e4m3, 1, 0, 8, 0, 0)
MXQF_INST(mx_quantize_rows_u8_f32_e4m3, 0, 0, 8, 0, 0)
MXQF_INST(mx_quantize_rows_cs_bf16_e4m3, 1, 0, MXQF_U, 1, 0)
MXQF_INST(mx_quantize_rows_cs_f32_e4m3, 0, 0, MXQF_U, 1, 0)
MXQF_INST(mx_quantize_rows_u8cs_bf16_e4m3, 1, 0, 8, 1, 0)
MXQF_INST(mx_quantize_rows_u8cs_f32_e4m3, 0, 0, 8, 1, 0)
MXQF_INST(mx_quantize_rows_pf_bf16_e4m3, 1, 0, MXQF_U, 0, 1)
MXQF_INST(mx_quantize_rows_pf_f32_e4m3, 0, 0, MXQF_U, 0, 1)
// variant 15 (diagnostic, no scale bytes stored), 16 (plain ld.global), 17 (chunk pairs)
extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) mx_quantize_rows_nosc_bf16_e4m3(const MxQuantFlatParams p) { mx_quant_flat<1, 0, MXQF_U, 0, 0, 0, 1>(p); }
extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) mx_quantize_rows_nosc_f32_e4m3(const MxQuantFlatParams p) { mx_quant_flat<0, 0, MXQF_U, 0, 0, 0, 1>(p); }
MXQF_INST(mx_quantize_rows_plain_bf16_e4m3, 1, 0, MXQF_U, 2, 0)
MXQF_INST(mx_quantize_rows_plain_f32_e4m3, 0, 0, MXQF_U, 2, 0)
extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) mx_quantize_rows_pairs_bf16_e4m3(const MxQuantFlatParams p) { mx_quant_flat_pairs<0, 2>(p); }
#endif

// ============================================================================================
// Warp-per-block 32x32 quantizer (TILE, optionally with TILE_T), R % 32 == 0 and C % 32 == 0:
// same bytes as mx_quantize_* with MXQ_TILE | MXQ_TILE_T (same helpers).
// HARNESS ONLY (MXQT_INSTANTIATE, bench/launch.cu): it measured 56-66 % of copy against the
// tiled kernel's 76-78 % (run 30), so the backend keeps the tiled kernel for 32x32. Each warp owns
// whole 32x32 blocks (grid-stride over blocks, column block fastest), so no CTA barrier:
// each 16-byte load of the warp covers whole block rows (8 bf16 / 4 f32 rows), the block
// amax is 5 xor-shuffles, the quantized bytes go to qa in full 32-byte sectors and to the
// warp's own 1 KB of shared memory (32 rows x 9 words), from which two PRMT 4x4 transposes
// per lane give full 32-byte sectors of qt. (Lane = row, 16 bytes of 32 rows per load,
// measured 45-52 % of copy, run 29: L2-bound on half-used sectors.)
// Why: the tiled kernel's 32x32 path (3 CTA barriers per tile, half the threads idle in the
// transposed store) ran at 75-81 % of copy (runs 9, 27, 28); ncu (run 28): DRAM 55 %,
// warps issuing every 11 cycles.
// Layouts per batch b (batch = nblocks / (R/32 * C/32)): qa [R][C], sa [R/32][C/32],
// qt [C][R], st [C/32][R/32] (qt / st may be null). Launch: block 256, any grid x >= 1
// (host rule: at most MXQT_CTAS_PER_SM (bf16) / MXQT_CTAS_PER_SM_F32 CTAs per SM, all
// resident).
// ============================================================================================
#ifdef MXQT_INSTANTIATE
#ifndef MXQT_CTAS_PER_SM
#define MXQT_CTAS_PER_SM 4      // bf16 input (64 registers)
#endif
#define MXQT_CTAS_PER_SM_F32 3  // f32 input: 32 registers of raw input per thread (80)
struct MxQuantTilesParams {
  const void* in;   // [batch][R][C] f32 or bf16
  mx_u8* qa; mx_u8* sa; mx_u8* qt; mx_u8* st;
  mx_i64 nblocks;   // batch * (R/32) * (C/32)
  int R, C, mode, pad_;
};

template <int IN_BF16, int FMT>
MX_DEV void mx_quant_tiles(const MxQuantTilesParams& p) {
  __shared__ mx_u32 tsm[8][32 * 9];
  constexpr int NCH = IN_BF16 ? 4 : 8;  // 16-byte chunks per block row
  constexpr int QW = MxqG<IN_BF16>::QW;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int RB = p.R >> 5, CB = p.C >> 5;
  const mx_i64 nwarps = (mx_i64)gridDim.x * (blockDim.x >> 5);
  mx_u32* tw = tsm[w];
  for (mx_i64 blk = (mx_i64)blockIdx.x * (blockDim.x >> 5) + w; blk < p.nblocks; blk += nwarps) {
    const int cb = (int)(blk % CB);
    const mx_i64 t = blk / CB;
    const int rb = (int)(t % RB);
    const mx_i64 b = t / RB;
    // chunk j = 32k + lane (k < NCH) of the block's 32 * NCH 16-byte chunks: row j / NCH,
    // chunk j % NCH of that row, so one load covers 32 / NCH whole 64-byte (bf16) or
    // 128-byte (f32) block rows and every sector is used in full.
    const mx_i64 row0 = b * p.R + rb * 32;  // first row of the block in [batch * R]
    const int cr = lane % NCH;
    mx_u32 raw[NCH][4];
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const mx_i64 off = (row0 + (32 * k + lane) / NCH) * p.C + cb * 32;
      const uint4* src = IN_BF16 ? reinterpret_cast<const uint4*>(reinterpret_cast<const mx_u16*>(p.in) + off)
                                 : reinterpret_cast<const uint4*>(reinterpret_cast<const float*>(p.in) + off);
      const uint4 v = __ldg(src + cr);
      raw[k][0] = v.x; raw[k][1] = v.y; raw[k][2] = v.z; raw[k][3] = v.w;
    }
    mx_u32 am = 0;
#pragma unroll
    for (int k = 0; k < NCH; ++k) am = max(am, mxq_chunk_amax<IN_BF16>(raw[k]));
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) am = max(am, __shfl_xor_sync(0xffffffffu, am, o));
    const mx_u32 sb = mx_scale_byte<FMT, true>(am, p.mode);
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const int r = (32 * k + lane) / NCH;
      mx_u32 q[QW];
      mxq_quant_chunk<IN_BF16, FMT>(raw[k], sb, q);
      mx_u8* dst = p.qa + (row0 + r) * p.C + cb * 32 + 4 * QW * cr;
      if (IN_BF16) *reinterpret_cast<uint2*>(dst) = make_uint2(q[0], q[QW - 1]);
      else *reinterpret_cast<mx_u32*>(dst) = q[0];
#pragma unroll
      for (int i = 0; i < QW; ++i) tw[r * 9 + QW * cr + i] = q[i];
    }
    if (lane == 0) p.sa[(b * RB + rb) * CB + cb] = (mx_u8)sb;
    if (p.qt != nullptr) {  // uniform
      __syncwarp();
      // lane (cw, h): columns 4cw..4cw+3, rows 8h..8h+7 of the block
      const int cw = lane & 7, h = lane >> 3;
      mx_u32 o[4][2];
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        const int rr = 8 * h + 4 * g;
        mxq_transpose4x4(tw[rr * 9 + cw], tw[(rr + 1) * 9 + cw], tw[(rr + 2) * 9 + cw], tw[(rr + 3) * 9 + cw],
                         o[0][g], o[1][g], o[2][g], o[3][g]);
      }
      __syncwarp();  // the next block rewrites tw
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const mx_i64 col = b * p.C + cb * 32 + 4 * cw + m;  // row of [batch * C]
        *reinterpret_cast<uint2*>(p.qt + col * p.R + rb * 32 + 8 * h) = make_uint2(o[m][0], o[m][1]);
      }
      if (lane == 0 && p.st != nullptr) p.st[(b * CB + cb) * RB + rb] = (mx_u8)sb;
    }
  }
}

#define MXQT_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256, (BF) ? MXQT_CTAS_PER_SM : MXQT_CTAS_PER_SM_F32) \
      NAME(const MxQuantTilesParams p) { mx_quant_tiles<BF, F>(p); }
MXQT_INST(mx_quantize_tiles_f32_e4m3, 0, 0)
MXQT_INST(mx_quantize_tiles_bf16_e4m3, 1, 0)
MXQT_INST(mx_quantize_tiles_f32_e5m2, 0, 1)
MXQT_INST(mx_quantize_tiles_bf16_e5m2, 1, 1)
#endif  // MXQT_INSTANTIATE

#ifdef MXQ_INSTANTIATE_LEGACY
// The run-7 kernel (one tile per CTA, f32 tile in shared memory), for A/B timing and
// bit-for-bit comparison in bench/ only. Launch: grid y = T exactly.
#define XS(r, c) xs_[(r) * 141 + (c) + 4 * ((c) >> 5)]

// One CTA = 256 threads = a tile of 32 rows x 128 columns.
// grid: x = ceil(C/128), y = row tiles (see README), z = batch.
template <int IN_BF16, int FMT>
MX_DEV void mx_quant_tile_legacy(const MxQuantParams& p) {
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

#define MXQ_INST_LEGACY(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256) NAME(const MxQuantParams p) { mx_quant_tile_legacy<BF, F>(p); }
MXQ_INST_LEGACY(mx_quantize_f32_e4m3_legacy, 0, 0)
MXQ_INST_LEGACY(mx_quantize_bf16_e4m3_legacy, 1, 0)
MXQ_INST_LEGACY(mx_quantize_f32_e5m2_legacy, 0, 1)
MXQ_INST_LEGACY(mx_quantize_bf16_e5m2_legacy, 1, 1)
#undef XS

#endif  // MXQ_INSTANTIATE_LEGACY

// E8M0 bytes -> FP32 scale table for the GEMM, with relayout and zero padding:
//   out[e*ose + (c/4)*ocg + r*osr + c%4] = (r < R && c < C) ? 2^(in[e*ise + (r/rdv)*isr + c*isc] - 127) : 0
// for r < Rp, c < Cp (Cp a multiple of 4). rdv = 32 expands an A operand quantized in 32x32
// tiles (scales [R/32][C]) into the per-row table the GEMM reads; otherwise 1. Row-major: ocg = 4; the GEMM's A-scale table
// is "stage-major": osr = 4, ocg = 4*Rp. grid: x = ceil(Rp*Cp/256), y = batch; block 256.
extern "C" __global__ void __launch_bounds__(256) mx_scales_to_f32(
    const mx_u8* __restrict__ in, mx_i64 ise, mx_i64 isr, mx_i64 isc,
    float* __restrict__ out, mx_i64 ose, mx_i64 osr, mx_i64 ocg, int R, int C, int Rp, int Cp, int rdv) {
  mx_i64 i = (mx_i64)blockIdx.x * 256 + threadIdx.x;
  if (i >= (mx_i64)Rp * Cp) return;
  int r = (int)(i / Cp), c = (int)(i % Cp);
  int e = blockIdx.y;
  float v = 0.f;
  if (r < R && c < C) v = mx_e8m0_to_f32(in[e * ise + (mx_i64)(r / rdv) * isr + c * isc]);
  out[e * ose + (mx_i64)(c >> 2) * ocg + r * osr + (c & 3)] = v;
}

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

template <int IN_BF16, int FMT>
MX_DEV void mx_fakequant_m32(const MxFakeQuantParams& p) {
  constexpr int NW = IN_BF16 ? 4 : 8;  // input words per row (8 columns)
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int cg = lane & 3, rg = lane >> 2;
  const int b0 = rg & 1, b1 = (rg >> 1) & 1, b2 = rg >> 2;
  const int C = p.C;
  const int col = blockIdx.x * 128 + w * 32 + cg * 8;
  const bool vec = (C & 7) == 0 && (((unsigned long long)p.inp | (unsigned long long)p.out) & 15ull) == 0 && col < C;
  // fast path: every scale byte in [THR, 253] (smallest non-zero FP8 x 2^(b-127) >= 2^-126)
  constexpr mx_u32 THR = FMT == 0 ? 10u : 17u;
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
    // ---- all-gather of the 8 scale bytes of this lane's columns ----
    const mx_u32 x = __shfl_xor_sync(0xffffffffu, sb, 4);
    const mx_u32 pr = b0 ? (x | (sb << 8)) : (sb | (x << 8));
    const mx_u32 y = __shfl_xor_sync(0xffffffffu, pr, 8);
    const mx_u32 qd = b1 ? (y | (pr << 16)) : (pr | (y << 16));
    const mx_u32 z = __shfl_xor_sync(0xffffffffu, qd, 16);
    const mx_u32 slo = b2 ? z : qd, shi = b2 ? qd : z;
    // (an all-zero column is exact on the fast path too: its elements dequantize to +-0)
    const bool fast = __all_sync(0xffffffffu, (sb >= THR && sb <= 253u) || am == 0u);

    float inv[8], sc[8];
    if (fast) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const mx_u32 be = ((e < 4 ? slo : shi) >> (8 * (e & 3))) & 0xFFu;
        inv[e] = __int_as_float((int)((254u - be) << 23));
        sc[e] = __int_as_float((int)(be << 23));
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = rg + 8 * i;
      mx_u32 o[4];
      if (fast) {
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
          const mx_u32 q = cvt_fp8x2<FMT>(mxfq_elem<IN_BF16>(raw[i], e) * inv[e], mxfq_elem<IN_BF16>(raw[i], e + 1) * inv[e + 1]);
          float lo, hi;
          mxfq_fp8x2_to_f32<FMT>(q, lo, hi);
          o[e >> 1] = __byte_perm((mx_u32)__float_as_int(lo * sc[e]), (mx_u32)__float_as_int(hi * sc[e + 1]), 0x7632);
        }
      } else {  // reference path (rare: tiny scales, NaN/Inf blocks)
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
          const mx_u32 ba = ((e < 4 ? slo : shi) >> (8 * (e & 3))) & 0xFFu;
          const mx_u32 bb = ((e < 4 ? slo : shi) >> (8 * ((e + 1) & 3))) & 0xFFu;
          mx_u32 q = cvt_fp8x2<FMT>(mxfq_elem<IN_BF16>(raw[i], e) * mx_inv_scale(ba),
                                    mxfq_elem<IN_BF16>(raw[i], e + 1) * mx_inv_scale(bb));
          if (ba == 0xFFu) q = (q & 0xFF00u) | 0x7Fu;
          if (bb == 0xFFu) q = (q & 0x00FFu) | 0x7F00u;
          const mx_u32 ra = mxfq_bf16_rne(mxfq_fp8_to_f32(q & 0xFFu, FMT) * mx_e8m0_to_f32(ba));
          const mx_u32 rb = mxfq_bf16_rne(mxfq_fp8_to_f32(q >> 8, FMT) * mx_e8m0_to_f32(bb));
          o[e >> 1] = ra | (rb << 16);
        }
      }
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

#define MXFQ_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(128, (BF) ? 8 : 6) NAME(const MxFakeQuantParams p) { mx_fakequant_m32<BF, F>(p); }
MXFQ_INST(mx_fakequant_m32_f32_e4m3, 0, 0)
MXFQ_INST(mx_fakequant_m32_bf16_e4m3, 1, 0)
MXFQ_INST(mx_fakequant_m32_f32_e5m2, 0, 1)
MXFQ_INST(mx_fakequant_m32_bf16_e5m2, 1, 1)
