// mx_gemm_cpasync.cuh — the cp.async grouped GEMM body (mx_gemm_*, the fallback for
// launches the TMA kernels cannot take): producer warpgroup with zero-fill masking,
// straight-line k32 groups, register epilogue.
// Requires mx_gemm_common.cuh. NVRTC-clean.
#pragma once

// One straight-line group of NS stages (4*NS k32 steps), drained at its end.
// Each k32 step is two m64n64k32 wgmmas (column halves); the two 32-register partial
// buffers alternate, so the promotion of one half overlaps the wgmma of the next and
// the consumer needs 64 + 2x32 accumulator registers (fits without spills).
template <int NC, int FA, int FB, int SB2D, int NS>
MX_DEV void mxg_group(float* acc, float* ta, float* tb, mx_u8* smem, mx_u64* full, mx_u64* empty,
                      int& stage, mx_u32& phase, int STAGES, int wg, int wrow, int lane) {
  typedef MxgLayout<NC, SB2D> L;
  const int st0 = stage;
  const int st1 = (stage + 1 == STAGES) ? 0 : stage + 1;
  // Wait for all stages of the group before the first wgmma (no wait loop while a
  // wgmma is in flight).
  mbar_wait(&full[st0], phase);
  if (NS == 2) mbar_wait(&full[st1], st1 == 0 ? (phase ^ 1) : phase);
  fence_proxy_async_smem();
  float sa0[4], sa1[4];
  const float* sbp;
  mxg_stage_regs<NC, SB2D>(smem, st0, wrow, sa0, sa1, sbp);
  const mx_u32 a0 = smem_u32(smem + (size_t)st0 * L::STAGE + wg * 8 * MXG_SBO);
  const mx_u32 a1 = smem_u32(smem + (size_t)st1 * L::STAGE + wg * 8 * MXG_SBO);
  // A: +2*LBO per k32 step; B: at +A_BYTES, +2*LBO per step, +8*SBO for columns 64..127.
  wgmma_fence();
  wgmma_m64n64k32<FA, FB>(ta, make_smem_desc(a0, MXG_LBO, MXG_SBO),
                          make_smem_desc(smem_u32(smem + (size_t)st0 * L::STAGE + L::A_BYTES), MXG_LBO, MXG_SBO));
  wgmma_commit();
#pragma unroll
  for (int q = 1; q < 8 * NS; ++q) {
    float* cur = (q & 1) ? tb : ta;
    float* prv = (q & 1) ? ta : tb;
    const int i = q >> 1, h = q & 1;
    const mx_u32 abase = (i < 4 ? a0 : a1) + 2 * MXG_LBO * (i & 3);
    reg_pin<32>(cur);
    wgmma_fence();
    wgmma_m64n64k32<FA, FB>(cur, make_smem_desc(abase, MXG_LBO, MXG_SBO),
                            make_smem_desc(abase - wg * 8 * MXG_SBO + L::A_BYTES + 8 * MXG_SBO * h, MXG_LBO, MXG_SBO));
    wgmma_commit();
    wgmma_wait<1>();
    reg_pin<32>(prv);
    const int qp = q - 1, jp = (qp >> 1) & 3;
    if (qp & 1) mxg_promote<SB2D, 1>(acc, prv, sa0[jp], sa1[jp], sbp + (SB2D ? 4 * jp : MXG_BN * jp), lane);
    else        mxg_promote<SB2D, 0>(acc, prv, sa0[jp], sa1[jp], sbp + (SB2D ? 4 * jp : MXG_BN * jp), lane);
    if (q == 8) {  // steps 0..3 complete: release stage 0, switch to stage 1's scales
      mbar_arrive_warp(&empty[st0], lane);
      mxg_stage_regs<NC, SB2D>(smem, st1, wrow, sa0, sa1, sbp);
    }
  }
  wgmma_wait<0>();
  reg_pin<32>(tb);
  mxg_promote<SB2D, 1>(acc, tb, sa0[3], sa1[3], sbp + (SB2D ? 4 * 3 : MXG_BN * 3), lane);
  mbar_arrive_warp(&empty[NS == 2 ? st1 : st0], lane);
#pragma unroll
  for (int g = 0; g < NS; ++g) {
    if (++stage == STAGES) { stage = 0; phase ^= 1; }
  }
}

template <int NC, int FA, int FB, int SB2D, int OUT_BF16, int STAGES>
MX_DEV void mx_grouped_gemm_impl(const MxGemmParams& p) {
  typedef MxgLayout<NC, SB2D> L;
  constexpr int BM = L::BM;
  MX_DYN_SMEM(smem, 1024);
  __shared__ __align__(8) mx_u64 full[STAGES], empty[STAGES];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) { mbar_init(&full[s], 128); mbar_init(&empty[s], 4 * NC); }
    fence_mbarrier_init();
  }
  if (tid < 32) {
    if (!p.batched) warp_group_tables(p.offs, p.E, BM, 1, g_start, g_pre);
    else warp_group_tables(p.offs, p.E, 128, 128, g_start, g_pre);
  }
  __syncthreads();

  const int ntn = (p.N + MXG_BN - 1) / MXG_BN;
  const int tiles_m = p.batched ? (p.M + BM - 1) / BM : g_pre[p.E];
  const int total = p.batched ? p.E * tiles_m * ntn : tiles_m * ntn;

  if (wg == NC) {
    // --------- producer warpgroup (registers handed to the consumers): 128 threads
    // --------- issue cp.async; each thread owns a fixed 16-byte K chunk and every
    // --------- 16th row, so one stage costs ~4 instructions per 16-byte copy.
    setmaxnreg_dec<40>();
    const int pt = tid - 128 * NC;
    const int kc16 = 16 * (pt & 7);                        // byte offset of this thread's K chunk
    const int rsub = pt >> 3;                              // row within each 16-row slab
    const mx_u32 sofs = (rsub >> 3) * MXG_SBO + (pt & 7) * MXG_LBO + (rsub & 7) * 16;
    int stage = 0; mx_u32 phase = 0;
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
      const MxgTile T = mxg_decode(p, t, BM, ntn, tiles_m, g_start, g_pre);
      const int nsteps = (T.klen + 31) >> 5;
      const int nst = (nsteps + 3) >> 2;
      const int kend = T.kbeg + T.klen;
      const mx_u8* Ap = p.A + (mx_i64)(T.row0 + rsub) * p.lda + kc16;
      const mx_u8* Bp = p.B + (mx_i64)T.e * p.b_es + (mx_i64)(T.n0 + rsub) * p.ldb + kc16;
      const mx_i64 astep = 16 * p.lda, bstep = 16 * p.ldb;
      const int arows = T.rows - rsub, brows = p.N - T.n0 - rsub;
      const float* SAp = p.SA + (mx_i64)(T.row0 + (pt < BM ? pt : 0)) * 4;
      const bool sa_ok = pt < BM && pt < T.rows;
      const float* SBexp = p.SB + (mx_i64)T.e * p.sb_es;
      for (int ks = 0; ks < nst; ++ks) {
        mbar_wait(&empty[stage], phase ^ 1);
        const mx_u32 sbase = smem_u32(smem + (size_t)stage * L::STAGE);
        const int k0 = T.kbeg + ks * MXG_BK;
        int nb = kend - (k0 + kc16);
        nb = nb < 0 ? 0 : (nb > 16 ? 16 : nb);
#pragma unroll
        for (int i = 0; i < BM / 16; ++i) {
          const int n = (16 * i < arows) ? nb : 0;
          cp_async16(sbase + sofs + 2 * MXG_SBO * i, n ? Ap + i * astep + k0 : p.A, n);
        }
#pragma unroll
        for (int i = 0; i < MXG_BN / 16; ++i) {
          const int n = (16 * i < brows) ? nb : 0;
          cp_async16(sbase + L::A_BYTES + sofs + 2 * MXG_SBO * i, n ? Bp + i * bstep + k0 : p.B, n);
        }
        const int kb0 = k0 >> 5;
        if (pt < BM) cp_async16(sbase + L::A_BYTES + L::B_BYTES + pt * 16, sa_ok ? SAp + (mx_i64)(kb0 >> 2) * p.ldsa : p.SA, sa_ok ? 16 : 0);
        if (SB2D) {
          if (pt < 4)
            cp_async16(sbase + L::A_BYTES + L::B_BYTES + L::SA_BYTES + pt * 16,
                       SBexp + (mx_i64)(kb0 + pt) * p.ldsb + (T.n0 >> 5), 16);
        } else {
          cp_async16(sbase + L::A_BYTES + L::B_BYTES + L::SA_BYTES + pt * 16,
                     SBexp + (mx_i64)(kb0 + (pt >> 5)) * p.ldsb + T.n0 + 4 * (pt & 31), 16);
        }
        cp_async_mbar_arrive_noinc(&full[stage]);
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
    }
  } else {
    // ------------------------------ consumers ------------------------------
    setmaxnreg_inc<NC == 2 ? 232 : 208>();
    const int lt = tid - 128 * wg;
    const int warp = lt >> 5, lane = lt & 31;
    const int wrow = 64 * wg + 16 * warp + (lane >> 2);   // tile row of acc[4j+0..1]; +8 for [4j+2..3]
    int stage = 0; mx_u32 phase = 0;
    float acc[64], ta[32], tb[32];
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
      const MxgTile T = mxg_decode(p, t, BM, ntn, tiles_m, g_start, g_pre);
      const int nsteps = (T.klen + 31) >> 5;
      int nst = (nsteps + 3) >> 2;
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.f;
      for (; nst >= 2; nst -= 2)
        mxg_group<NC, FA, FB, SB2D, 2>(acc, ta, tb, smem, full, empty, stage, phase, STAGES, wg, wrow, lane);
      if (nst == 1)
        mxg_group<NC, FA, FB, SB2D, 1>(acc, ta, tb, smem, full, empty, stage, phase, STAGES, wg, wrow, lane);
      // ---- epilogue: registers -> global ----
      const int r0 = wrow, r1 = wrow + 8;
      const int cofs = 2 * (lane & 3);
      if (!p.batched || !p.out_t) {
        mx_i64 ob = p.batched ? (mx_i64)T.e * p.o_es : 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = h ? r1 : r0;
          if (r < T.rows) {
            const mx_i64 rowoff = ob + (mx_i64)(T.row0 + r) * p.ldo;
#pragma unroll
            for (int j = 0; j < 16; ++j) {
              const int col = T.n0 + 8 * j + cofs;
              if (col < p.N) {
                const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
                if (OUT_BF16) {
                  mx_u32* o = reinterpret_cast<mx_u32*>(reinterpret_cast<mx_u16*>(p.out) + rowoff + col);
                  *o = pack_bf16x2(v0, v1);
                } else {
                  float2* o = reinterpret_cast<float2*>(reinterpret_cast<float*>(p.out) + rowoff + col);
                  *o = make_float2(v0, v1);
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
            for (int j = 0; j < 16; ++j) {
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
  }

  // ---- grouped mode: zero the padding rows (rows >= offs[E-1]) ----
  if (!p.batched) {
    const mx_i64 r_begin = g_start[p.E];
    const mx_i64 cnt = ((mx_i64)p.M - r_begin) * p.N;
    for (mx_i64 i = (mx_i64)blockIdx.x * blockDim.x + tid; i < cnt; i += (mx_i64)gridDim.x * blockDim.x) {
      const mx_i64 r = r_begin + i / p.N, c = i % p.N;
      if (OUT_BF16) reinterpret_cast<mx_u16*>(p.out)[r * p.ldo + c] = 0;
      else reinterpret_cast<float*>(p.out)[r * p.ldo + c] = 0.f;
    }
  }
}
