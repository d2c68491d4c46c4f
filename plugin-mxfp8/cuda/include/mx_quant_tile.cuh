// mx_quant_tile.cuh — the tiled quantizer (mx_quantize_*: 1x32 rows, 32x1 columns written
// transposed and group-aware, 32x32 tiles with an optional transposed copy) and its
// TMA-fed 32x32 variant (mx_quantize_t32_*).
// Requires mx_quant_blocks.cuh (and mx_quant_values.cuh before the kernels are instantiated). NVRTC-clean.
#pragma once

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

template <int FMT> MX_DEV mx_u32 mxfq_bf16x2(mx_u32 q16, mx_u32 sb, bool fast);

// LT (bf16, ungrouped TILE_T only; see mxq_loop_tma): the transposed words of the tile go to
// lt_buf (one row group of 4 tiles, mxq_lt_addr) instead of global memory; the loop stores
// the group's transposed rows as whole 128-byte lines (mxq_lt_flush).
MX_DEV mx_u32 mxq_lt_addr(int row, int chunk) { return row * 128 + 32 * (chunk ^ ((row >> 2) & 3)); }

template <int IN_BF16, int FMT, int MASK, int LT = 0>
MX_DEV void mxq_process(const MxQuantParams& p, MxqSmem& s, const MxqTile& tl, int c0, int b, int par, int pflags,
                        const mx_u32 (&raw)[MxqG<IN_BF16>::NCH][4], mx_u8* lt_buf = nullptr, int lt_tile = 0) {
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
      if (LT) {
        // transposed row 4cw + m, bytes 32 lt_tile + 8h .. +7 of the group's 128; the chunk
        // swizzle puts the 8 columns of a warp on 4 distinct 32-byte bank groups.
#pragma unroll
        for (int m = 0; m < 4; ++m)
          *reinterpret_cast<uint2*>(lt_buf + mxq_lt_addr(4 * cw + m, lt_tile) + 8 * h) = make_uint2(o[m][0], o[m][1]);
        return;
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
              "QuantParams / QuantTmaParams in src/backend/cuda/params.rs hard-code these sizes");

// LT = 1 (ungrouped TILE_T; the caller checks): the CTA's tiles come in row groups of four
// consecutive tiles (group g = blockIdx.y + i * gridDim.y holds tiles 4g .. 4g + 3, so grid
// y counts groups), and each group's transposed bytes (128 rows of W^T, 128 bytes each)
// are gathered in shared memory and stored as whole 128-byte lines. Why: with one tile the
// transposed rows are 32 bytes long, so each warp store touched 8 lines per 256 bytes (the
// W + W^T pass ran at 84-88 % of copy, W alone at 92-96 %). LT = 2: the same without the
// global stores of W^T (harness diagnostic, wrong output).
template <int LT>
MX_DEV void mxq_lt_flush(const MxQuantParams& p, const mx_u8* lt_buf, int c0, int b, int g) {
  __syncthreads();  // every thread's transposed words of the group are in lt_buf
  const int t = threadIdx.x;
  const int vlen = min(128, p.R - 128 * g);  // valid bytes of each transposed row
  const bool vec = (p.ldt & 15) == 0 && (p.qt_bs & 15) == 0 && (reinterpret_cast<unsigned long long>(p.qt) & 15) == 0;
#pragma unroll
  for (int pass = 0; pass < 4; ++pass) {
    const int row = 32 * pass + (t >> 3), q = t & 7, boff = 16 * q;
    const int gcol = c0 + row;
    if (LT == 1 && gcol < p.C && boff < vlen) {
      const uint4 v = *reinterpret_cast<const uint4*>(lt_buf + mxq_lt_addr(row, q >> 1) + 16 * (q & 1));
      mx_u8* dst = p.qt + b * p.qt_bs + (mx_i64)gcol * p.ldt + 128 * g + boff;
      if (vec && boff + 16 <= vlen) {
        *reinterpret_cast<uint4*>(dst) = v;
      } else {
#pragma unroll 1
        for (int i = 0; i < 16 && boff + i < vlen; ++i) {
          const mx_u32 w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;  // no local array
          dst[i] = (mx_u8)(w >> (8 * (i & 3)));
        }
      }
    }
  }
}

template <int FMT, int AS, int LT = 0>
MX_DEV void mxq_loop_tma(const MxQuantTmaParams& P, MxqSmem& s, mx_u8* slots, mx_u64* bars, int nt, int flags,
                         mx_u8* lt_buf = nullptr) {
  const MxQuantParams& p = P.p;
  constexpr int SLOT = 32 * 128 * 2;
  constexpr int MASK = MXQ_ROWS | MXQ_TILE | MXQ_TILE_T;
  const int t = threadIdx.x;
  const int c0 = blockIdx.x * 128;
  const int b = blockIdx.z;
  const int G = (int)gridDim.y;
  // the CTA's i-th tile
  auto tile_of = [&](int i) { return LT ? 4 * ((int)blockIdx.y + (i >> 2) * G) + (i & 3) : (int)blockIdx.y + i * G; };
  int i = 0, ty = tile_of(0);
  const int r = 4 * (t >> 5) + ((t & 31) >> 3), j = t & 7;
  auto issue = [&](int tyi, int sl) {
    const MxqTile ti = mxq_map_tile(p, s, tyi);
    fence_proxy_async_smem();  // the slot's last generic reads come before this async write
    mbar_arrive_expect_tx(&bars[sl], SLOT);
    tma_load_2d(smem_u32(slots + sl * SLOT), &P.tm, c0, b * p.R + ti.src0, &bars[sl]);
  };
  if (t == 0) {
#pragma unroll
    for (int k = 0; k < AS - 1; ++k)
      if (tile_of(k) < nt) issue(tile_of(k), k);
  }
  int slot = 0, par = 0;
  mx_u32 phases = 0;  // bit s: parity of slot s's next completion
  while (true) {
    const int tyn = tile_of(i + AS - 1);
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
    mxq_process<1, FMT, MASK, LT ? 1 : 0>(p, s, tl, c0, b, par, flags, cur, lt_buf, i & 3);
    const int tnext = tile_of(++i);
    // a group ends after its 4th tile or at the tensor's last one (only a CTA's last group
    // can be short)
    if (LT && ((i & 3) == 0 || tnext >= nt)) mxq_lt_flush<LT>(p, lt_buf, c0, b, ty >> 2);
    ty = tnext;
    if (ty >= nt) break;
    par ^= 1;
    slot = slot + 1 == AS ? 0 : slot + 1;
  }
}

// Kernel body of mx_quantize_t32_*: bf16 input, C % 8 == 0, in 16-byte aligned, batches
// contiguous (in_bs == R * C), flags within TILE | TILE_T. Launch contract and host rule
// as mx_quantize_* (4 tiles per CTA).
// LT (mxq_loop_tma): 1 or 2 take the row-group loop where the launch is ungrouped with
// TILE_T (grid y then counts groups of 4 tiles: the host rule's tiles / 4), else the tile loop.
// The group's 16 KB line buffer starts MXQ_LT_OFF bytes before the MxqSmem and covers its
// group tables and COLS tables, which that loop never uses (4 CTAs per SM still fit under
// the 48 KB static limit: 41.6 -> 45.6 KB).
#define MXQ_LT_OFF (128 * 128 - (int)sizeof(MxqSmemHead))
template <int FMT, int AS, int LT = 0>
MX_DEV void mx_quant_tile32(const MxQuantTmaParams& P) {
  const MxQuantParams& p = P.p;
  static_assert(MXQ_LT_OFF >= 0 && MXQ_LT_OFF % 16 == 0, "MxqSmem layout");
  __shared__ __align__(16) mx_u8 sraw[(LT ? MXQ_LT_OFF : 0) + sizeof(MxqSmem)];
  MxqSmem& s = *reinterpret_cast<MxqSmem*>(sraw + (LT ? MXQ_LT_OFF : 0));
  mx_u8* lt_buf = sraw;
  __shared__ __align__(128) mx_u8 slots[AS * 32 * 128 * 2];
  __shared__ __align__(8) mx_u64 bars[AS];
  if (threadIdx.x == 0) {
    for (int i = 0; i < AS; ++i) mbar_init(&bars[i], 1);
    fence_mbarrier_init();
    tma_prefetch_desc(&P.tm);
  }
  if (p.offs != nullptr && threadIdx.x >= 32 && threadIdx.x < 64) warp_group_tables(p.offs, p.E, 128, 128, s.g_start, s.g_pre);
  __syncthreads();
  const int nt = mxq_num_tiles(p, s);
  if ((int)blockIdx.y >= nt) return;
  const int flags = p.flags & (MXQ_TILE | MXQ_TILE_T);
  if (LT && p.offs == nullptr && (flags & MXQ_TILE_T)) {
    if ((int)blockIdx.y * 128 < p.R) mxq_loop_tma<FMT, AS, LT>(P, s, slots, bars, nt, flags, lt_buf);
  } else {
    mxq_loop_tma<FMT, AS>(P, s, slots, bars, nt, flags);
  }
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
    if constexpr (AS > 0) mxq_loop_ring<IN_BF16, FMT, MXQ_ROWS, (AS > 1 ? AS : 2)>(p, s, ring, nt, flags);
    else mxq_loop<IN_BF16, FMT, MXQ_ROWS>(p, s, nt, flags);                             // 1x32 rows
  } else {
    if (!cols || two) {                                                            // 32x32 (+T)
      if constexpr (AS > 0) mxq_loop_ring<IN_BF16, FMT, MXQ_ROWS | MXQ_TILE | MXQ_TILE_T, (AS > 1 ? AS : 2)>(p, s, ring, nt, flags);
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
// Implemented by `fn quant` (plugin-mxfp8/src/backend/cuda/quantize.rs), mirrored by bench/launch.cu.

// bf16 input: 64 registers (4 CTAs = 1024 threads per SM); f32 input: 80 (3 CTAs): its
// 16-register tiles do not fit the transposing paths in 64 without spilling.
// bf16 input reads through an MXQ_ASYNC_STAGES-slot cp.async ring (mxq_loop_ring, 8 KB of
// shared memory per slot, static: 3 slots + MxqSmem = 41 KB, under the 48 KB static limit;
// 4 CTAs per SM use 165 KB); f32 input (16 KB per slot) keeps the register prefetch.
#ifndef MXQ_ASYNC_STAGES
#define MXQ_ASYNC_STAGES 3
#endif
