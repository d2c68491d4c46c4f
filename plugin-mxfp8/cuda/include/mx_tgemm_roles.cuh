// mx_tgemm_roles.cuh — what every TMA GEMM kernel runs around its main loop: the
// register and TMA-store epilogues, zeroing of padding rows, barrier init, and the
// persistent producer and consumer tile loops.
// Requires mx_tgemm_pipeline.cuh. NVRTC-clean.
#pragma once

template <int OUT_BF16, int NACC = 64>
MX_DEV void mxt_epilogue(const MxGemmParams& p, const MxgTile& T, const float* acc, int wrow, int lane) {
  const int r0 = wrow, r1 = wrow + 8;
  const int cofs = 2 * (lane & 3);
  if (!p.batched || !p.out_t) {
    const mx_i64 ob = p.batched ? (mx_i64)T.e * p.o_es : 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h ? r1 : r0;
      if (r < T.rows) {
        const mx_i64 rowoff = ob + (mx_i64)(T.row0 + r) * p.ldo;
#pragma unroll
        for (int j = 0; j < NACC / 4; ++j) {
          const int col = T.n0 + 8 * j + cofs;
          if (col < p.N) {
            const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if (OUT_BF16) {
              *reinterpret_cast<mx_u32*>(reinterpret_cast<mx_u16*>(p.out) + rowoff + col) = pack_bf16x2(v0, v1);
            } else {
              *reinterpret_cast<float2*>(reinterpret_cast<float*>(p.out) + rowoff + col) = make_float2(v0, v1);
            }
          }
        }
      }
    }
  } else {
    const mx_i64 ob = (mx_i64)T.e * p.o_es;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h ? r1 : r0;
      if (r < T.rows) {
#pragma unroll
        for (int j = 0; j < NACC / 4; ++j) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int col = T.n0 + 8 * j + cofs + c;
            if (col < p.N) {
              const mx_i64 off = ob + (mx_i64)col * p.ldo + T.row0 + r;
              const float v = acc[4 * j + 2 * h + c];
              if (OUT_BF16) reinterpret_cast<mx_u16*>(p.out)[off] = (mx_u16)(pack_bf16x2(v, 0.f) & 0xFFFF);
              else reinterpret_cast<float*>(p.out)[off] = v;
            }
          }
        }
      }
    }
  }
}

// Epilogue through shared memory and TMA (bf16 output, full 128-row tiles): each consumer
// warpgroup writes its 64 x 128 half as two 64 x 64 boxes in the 128B-swizzled layout (16-byte
// chunk index XOR row % 8: the eight rows a warp writes per store hit distinct banks) and
// one thread issues two TMA stores; the warpgroup goes on to its next tile while they run,
// so the stores overlap the next main loop instead of stalling the tensor core (run 25: the
// register epilogue costs v2u 6-7 %). The staging buffer is reused one tile later, after
// bulk_wait_read. Columns past N are clipped by the tensor map (rows are full by the caller).
struct MxtStore { const MxTmap* tm; mx_u32 sbuf; int wg; int lt; int r64; };  // r64: the 64-row block of T it stores
MX_DEV void mxt_epilogue_tma(const MxGemmParams& p, const MxgTile& T, const float* acc, const MxtStore& st, int lane) {
  if (st.lt == 0) bulk_wait_read<0>();
  named_bar_sync(1 + st.wg, 128);
  const int rl = 16 * (st.lt >> 5) + (lane >> 2);   // row in the warpgroup's 64 (and rl + 8)
  const mx_u32 sw = (mx_u32)(rl & 7);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const mx_u32 box = st.sbuf + (j >> 3) * 8192;
    const mx_u32 off = ((((mx_u32)j & 7) ^ sw) << 4) + 4 * (lane & 3);
    st_shared_b32(box + rl * 128 + off, pack_bf16x2(acc[4 * j], acc[4 * j + 1]));
    st_shared_b32(box + (rl + 8) * 128 + off, pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]));
  }
  fence_proxy_async_smem();
  named_bar_sync(1 + st.wg, 128);
  if (st.lt == 0) {
    const int r = (p.batched ? T.e * p.M : 0) + T.row0 + 64 * st.r64;
    tma_store_2d(st.tm, st.sbuf, T.n0, r);
    tma_store_2d(st.tm, st.sbuf + 8192, T.n0 + 64, r);
    bulk_commit();
  }
}

// Grouped mode: zero the output's padding rows (rows >= offs[E-1]); called by the 256
// consumer threads of the TMA kernels after their last tile (never by the producer, whose
// registers are too few).
template <int OUT_BF16>
MX_DEV void mxt_zero_padding_rows(const MxGemmParams& p, const int* g_start, int tid) {
  if (p.batched) return;
  const mx_i64 r_begin = g_start[p.E];
  const mx_i64 cnt = ((mx_i64)p.M - r_begin) * p.N;
  for (mx_i64 i = (mx_i64)blockIdx.x * 256 + tid; i < cnt; i += (mx_i64)gridDim.x * 256) {
    const mx_i64 r = r_begin + i / p.N, c2 = i % p.N;
    if (OUT_BF16) reinterpret_cast<mx_u16*>(p.out)[r * p.ldo + c2] = 0;
    else reinterpret_cast<float*>(p.out)[r * p.ldo + c2] = 0.f;
  }
}

MX_DEV MxtCtx mxt_ctx(const MxGemmParams& p, const int* g_start, const int* g_pre, int bm = MXT_BM, int bn = MXG_BN) {
  MxtCtx c;
  c.ntn = (p.N + bn - 1) / bn;
  c.tiles_m = p.batched ? (p.M + bm - 1) / bm : g_pre[p.E];
  c.total = p.batched ? p.E * c.tiles_m * c.ntn : c.tiles_m * c.ntn;
  c.brows_e = p.batched ? 0 : (int)(p.b_es / p.ldb);
  c.g_start = g_start; c.g_pre = g_pre;
  return c;
}

// ---- pieces shared by the TMA kernels (MODE 0-3, v2/v2u/v3, v4) ----
// 1024-aligned base of the dynamic shared memory (TMA SWIZZLE_128B needs it).
MX_DEV mx_u32 mxt_smem_base(const mx_u8* smem) { return (smem_u32(smem) + 1023u) & ~1023u; }

// Barrier init (full: 1 arrival, the producer's expect-tx; empty: one per consumer warp
// that reads the stage), tensor-map prefetch and the expert tables for BM-row tiles.
MX_DEV void mxt_setup(const MxGemmTmaParams& P, mx_u64* full, mx_u64* empty, int nbar, int empty_arrivals,
                      int bm, int* g_start, int* g_pre) {
  const MxGemmParams& p = P.g;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < nbar; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], empty_arrivals); }
    fence_mbarrier_init();
    tma_prefetch_desc(&P.tmA); tma_prefetch_desc(&P.tmB);
  }
  if (tid >= 32 && tid < 64) {
    if (!p.batched) warp_group_tables(p.offs, p.E, bm, 1, g_start, g_pre);
    else warp_group_tables(p.offs, p.E, 128, 128, g_start, g_pre);
  }
  __syncthreads();
}

// One producer thread: fills the STAGES-stage ring at sbase for the tiles first,
// first + step, ... of this CTA's sequence until the sequence ends.
template <int SB2D, int STAGES, int PAD2, class LAY, int MC = 0, int RES = 0>
MX_DEV void mxt_produce(const MxGemmTmaParams& P, const int* g_start, const int* g_pre, mx_u32 sbase,
                        int first, int step, mx_u64* full, mx_u64* empty, int crank = 0) {
  const MxtCtx c = mxt_ctx(P.g, g_start, g_pre, MC ? 2 * LAY::BM : LAY::BM, LAY::BN);
  MxtProd prod;
  prod.step = step;
  prod.crank = crank;
  prod.t = first - step; prod.ks = 0; prod.nst = 0;
  prod.row0 = prod.brow = prod.n0 = prod.e = prod.kbeg = 0;
  prod.stage = 0; prod.phase = 0; prod.pc = 0; prod.nreal = 0;
  mxt_fill<SB2D, STAGES, PAD2, LAY, MC, RES>(prod, 0x7ffffffe, P, c, sbase, full, empty);
}

// The consumers' tile loop: for each tile of the sequence, zero acc, run_groups(nst) (the
// main loop over the tile's nst stages), then the epilogue. The tile is decoded again after
// the main loop so that nothing of it is live across it (register fit, see mx_tgemm_impl).
// NACC accumulators per thread (BN / 2); run_groups(nst, sbsh) gets the tile's stage count and
// (n0 / 32) & 3, where its first weight-scale column block sits in a v5 scale window.
// With TMA (v2t), full 128-row tiles of a bf16 output leave through mxt_epilogue_tma.
// half >= 0 (v6, v7): the CTA computes the hrows-row half `half` of each bm-row tile (its rows
// and row count cut to that half; a half past the tile's rows stores nothing).
MX_DEV MxgTile mxt_half(MxgTile T, int half, int hrows = 64) {
  if (half >= 0) {
    T.row0 += hrows * half;
    T.rows = min(max(T.rows - hrows * half, 0), hrows);
  }
  return T;
}
template <int OUT_BF16, int NACC = 64, int BN = MXG_BN, bool STORE = true, bool TMA = false, class RunGroups>
MX_DEV void mxt_consume(const MxGemmParams& p, const MxtCtx& c, const int* g_start, const int* g_pre, int bm,
                        int first, int step, float* acc, int wrow, int lane, RunGroups run_groups,
                        const MxtStore* tst = nullptr, int half = -1, int hrows = 64) {
  for (int t = first; t < c.total; t += step) {
    int nst, sbsh;
    {
      const MxgTile T = mxg_decode(p, t, bm, c.ntn, c.tiles_m, g_start, g_pre, BN);
      nst = mxt_tile_stages(p, T, g_pre);
      sbsh = (T.n0 >> 5) & 3;
    }
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
    run_groups(nst, sbsh);
    int te = t;
    asm volatile("" : "+r"(te));   // decode again after the main loop (no live range across it)
    const MxgTile T = mxt_half(mxg_decode(p, te, bm, c.ntn, c.tiles_m, g_start, g_pre, BN), half, hrows);
    if constexpr (TMA && OUT_BF16 && NACC == 64) {
      if (tst->tm != nullptr && T.rows == (half >= 0 ? hrows : 128)) { mxt_epilogue_tma(p, T, acc, *tst, lane); continue; }
    }
    if (STORE || p.N < 0) mxt_epilogue<OUT_BF16, NACC>(p, T, acc, wrow, lane);  // !STORE: diagnostic, no stores
  }
  if constexpr (TMA) {
    if (tst->lt == 0) bulk_wait<0>();
  }
}
