// mx_tgemm_pipeline.cuh — the TMA grouped GEMM (mx_tgemm_*): parameters, stage layouts,
// the producer's stage fill and the MODE 0 main-loop group.
// Requires mx_gemm_common.cuh. NVRTC-clean.
#pragma once

// =====================================================================================
// mx_tgemm_*: TMA + 128-byte swizzle version (the fast path).
// CTA = 288 threads: warpgroups 0-1 = consumers (m64 x n128 each, tile 128 x 128), warp 8 =
// producer (lane 0 issues the two TMA tile loads per stage; the 32 lanes cp.async the
// stage's FP32 scales). No setmaxnreg: with 288 threads ptxas may give every thread up to
// 224 registers (__maxnreg__(224); __launch_bounds__(288,1) rounds to 3 warpgroups = 168).
// Each k32 step is two m64n64k32 wgmmas (column halves) into alternating 32-register
// buffers (acc[64] + 2 x 32 fits without spills; one m64n128 into two 64-register buffers
// needs ~230 registers and spilled); groups of 8 steps (2 stages) are straight-line and
// drain at their end (no wgmma in flight across a loop back-edge: no C7514).
// Stage layout (1024-aligned): A 128 rows x 128 B (TMA, SWIZZLE_128B) | B 128 x 128 B |
// SA 128 rows x 4 kb FP32 | SB (w2d: 4 kb x 4 column blocks FP32, w1d: 4 kb x 128 FP32).
struct MxGemmTmaParams {
  MxTmap tmA;       // A operand, see README.md (box 128 x 128 bytes, SWIZZLE_128B)
  MxTmap tmB;       // B operand
  MxGemmParams g;   // exactly as for mx_gemm_*
  // The chained forward's gate (src/backend/cuda/chain.rs), null when there is none: the
  // re-encoding's status words {flags, residual count}. With both GEMMs enqueued, the chained
  // kernel runs iff mxt_chain_open(), the per-k32 kernel iff not, so the host never waits.
  const int* gate;
  int limit;        // the most residuals (both operands) the chained kernel takes
  int limit_lo;     // and the fewest (0 for the per-k32 kernels): two chained builds split the counts
};
// (The status flags are mx_reencode.cuh's MX_RES_*; any of them closes the gate.) A per-k32
// kernel's [limit_lo, limit] is the union of the chained builds' ranges.
MX_DEV bool mxt_chain_open(const MxGemmTmaParams& P) { return mx_chain_took(P.gate, P.limit, P.limit_lo); }
// The per-k32 kernels' first statement: whether the chained kernel took this GEMM.
#define MXT_RETURN_IF_CHAINED(P) \
  if ((P).gate != nullptr && mxt_chain_open(P)) return;
// The TMA-store kernels (v2t) take the output tensor map too: bf16 [rows][N] (batched:
// rows = E * M, which needs o_es == M * ldo and out_t == 0), box 64 x 64 elements,
// SWIZZLE_128B. o_tma = 0 makes every tile take the register epilogue.
struct MxGemmTmaParamsO {
  MxGemmTmaParams b;
  MxTmap tmO;
  int o_tma;
};

#define MXT_BM 128
#define MXT_THREADS 384
#define MXT_SA_OFF 32768
#define MXT_SB_OFF 34816
template <int SB2D> struct MxtLayout { static constexpr int STAGE = SB2D ? 35840 : 36864; };

// Where things sit in one pipeline stage, per CTA shape (the producer's fill and the v2
// main loop are written against these). Lay128: one 128 x 128 tile shared by both consumer
// warpgroups (warpgroup w's A rows at +w * A_WG). Lay64: v4, one 64-row tile per warpgroup
// in its own ring (A 64 rows x 128 B | B 128 x 128 B | SA 64 rows x 16 B | SB).
template <int SB2D> struct MxtLay128 {
  static constexpr int BM = 128, BN = 128, STAGE = MxtLayout<SB2D>::STAGE;
  static constexpr int A_WG = 8192, B_OFF = 16384, SA_OFF = MXT_SA_OFF, SB_OFF = MXT_SB_OFF;
};
template <int SB2D> struct MxtLay64 {
  static constexpr int BM = 64, BN = 128, STAGE = SB2D ? 26624 : 27648;
  static constexpr int A_WG = 0, B_OFF = 8192, SA_OFF = 24576, SB_OFF = 25600;
};
// v5: 128 x 192 tiles, 32x32 weight scales only. A 128 rows x 128 B | B 192 x 128 B |
// SA 128 rows x 16 B | SB 4 kb x 8 FP32 (a 32-byte window of the weight-scale row starting at
// the 16-byte-aligned column block (n0/32) & ~3; the tile's first block sits at +0 or +2:
// the SB table needs ldsb >= roundup(NB, 4) + 4 so that no window reads past a row).
template <int SB2D> struct MxtLay192 {
  static_assert(SB2D == 1, "the 128 x 192 tile kernels take 32x32 weight scales only");
  static constexpr int BM = 128, BN = 192, STAGE = 44032;
  static constexpr int A_WG = 8192, B_OFF = 16384, SA_OFF = 40960, SB_OFF = 43008;
};

// Producer state (one thread of the producer warpgroup): it walks the same persistent tile
// sequence as the consumers and issues one stage at a time.
struct MxtProd {
  int t, ks, nst;        // tile, stage within tile, stages of the tile
  int row0, brow, n0, e, kbeg;
  int stage; mx_u32 phase;
  int pc;                // stages issued so far (0x7fffffff once the sequence is done)
  int nreal;             // PAD2 (v3) only: real stages of the tile (nst = nreal rounded up to even)
  int step;              // tile stride of this producer's sequence (gridDim.x; v4: 2 * gridDim.x)
  int crank;             // MC (v6) only: this CTA's rank in its 2-CTA cluster (its 64-row half, its B half)
};
struct MxtCtx { int ntn, tiles_m, total, brows_e; const int* g_start; const int* g_pre; };

MX_DEV int mxt_tile_stages(const MxGemmParams& p, const MxgTile& T, const int* g_pre) {
  return p.batched ? (g_pre[T.e + 1] - g_pre[T.e]) >> 7 : (p.K + MXG_BK - 1) / MXG_BK;
}

// Issue stages until `limit` stages have been issued or the tile sequence ends. Stage
// number s reuses the buffers of stage s - STAGES: the wait on empty[] needs both
// consumer warpgroups to have released that stage.
// PAD2 (v3): a tile's stage count is rounded up to even; the extra stage is a zero stage:
// both TMA boxes start at the tensor's inner extent (entirely out of bounds: TMA zero-fills
// them and still completes the full box bytes) and its scale region (SA and SB) is written
// with zeros by this thread. Its k32 partials are +0 (all products +0 * +0), promoted as
// fmaf(+0, 0 * s, acc) = acc exactly (acc is never -0: it starts at +0 and x + (+0) is +0
// for x = -0 in round-to-nearest), so results equal the unpadded v2 kernel bit for bit.
// MC (v6): the CTA is one half of a 2-CTA cluster that shares 128-row tiles: it loads its own
// 64 rows of A and, multicast to both CTAs, its 64-row half of the tile's B (the peer loads
// the other half), so each CTA's full[] barrier receives the whole B; tiles are decoded with
// 2 * LAY::BM rows (both CTAs walk the same sequence) and empty[] counts both CTAs' consumers.
// RES (diagnostic, MXT_OPT_RESIDENT): stages after the first STAGES are released by a plain
// arrive, without loading anything (the consumers read what the ring already holds).
template <int SB2D, int STAGES, int PAD2 = 0, class LAY = MxtLay128<SB2D>, int MC = 0, int RES = 0>
MX_DEV void mxt_fill(MxtProd& s, int limit, const MxGemmTmaParams& P, const MxtCtx& c,
                     mx_u32 sbase, mx_u64* full, mx_u64* empty) {
  static_assert(!(PAD2 && MC), "the zero stage (PAD2) has no multicast variant");
  constexpr int STAGE = LAY::STAGE;
  constexpr int ABYTES = LAY::BM * 128;
  constexpr int DBM = MC ? 2 * LAY::BM : LAY::BM;   // rows of a decoded tile
  const MxGemmParams& p = P.g;
  while (s.pc < limit) {
    while (s.ks >= s.nst) {
      s.t += s.step;
      if (s.t >= c.total) { s.pc = 0x7fffffff; return; }
      const MxgTile T = mxg_decode(p, s.t, DBM, c.ntn, c.tiles_m, c.g_start, c.g_pre, LAY::BN);
      s.nst = mxt_tile_stages(p, T, c.g_pre);
      if (PAD2) { s.nreal = s.nst; s.nst = (s.nst + 1) & ~1; }
      s.ks = 0;
      s.row0 = T.row0 + (MC ? LAY::BM * s.crank : 0); s.n0 = T.n0; s.e = T.e; s.kbeg = T.kbeg;
      s.brow = T.e * c.brows_e + T.n0;
    }
    // MC spins: with the parked wait v6t measured 2-5 % below v2t, spinning 0.5-3 % (runs 63
    // and 68, interleaved A/B); the peer's arrivals come through distributed shared memory.
    if (MC) mbar_wait(&empty[s.stage], s.phase ^ 1);
    else mbar_wait_parked(&empty[s.stage], s.phase ^ 1);
    const mx_u32 dst = sbase + s.stage * STAGE;
    if (RES && s.pc >= STAGES) {
      mbar_arrive(&full[s.stage]);
      ++s.ks; ++s.pc;
      if (++s.stage == STAGES) { s.stage = 0; s.phase ^= 1; }
      continue;
    }
    if (PAD2 && s.ks >= s.nreal) {
      // zero stage: scales 0 (generic stores, ordered before the consumers' reads by the
      // mbarrier arrive's release; the proxy fence orders them before later bulk copies
      // into the same bytes), data zero-filled by out-of-bounds TMA boxes.
#pragma unroll 1
      for (mx_u32 o = LAY::SA_OFF; o < (mx_u32)STAGE; o += 16)
        st_shared_v4_splat(dst + o, 0);
      fence_proxy_async_smem();
      mbar_arrive_expect_tx(&full[s.stage], ABYTES + LAY::BN * 128);
      tma_load_2d(dst, &P.tmA, p.batched ? (int)p.lda : p.K, s.row0, &full[s.stage]);
      tma_load_2d(dst + LAY::B_OFF, &P.tmB, p.batched ? (int)p.ldb : p.K, s.brow, &full[s.stage]);
      ++s.ks; ++s.pc;
      if (++s.stage == STAGES) { s.stage = 0; s.phase ^= 1; }
      continue;
    }
    const int k0 = s.kbeg + s.ks * MXG_BK;
    const int kb0 = k0 >> 5;
    int sa_rows = p.M - s.row0;
    sa_rows = sa_rows < LAY::BM ? sa_rows : LAY::BM;       // never read past the SA table
    if (MC && sa_rows < 0) sa_rows = 0;                    // (a second half past the buffer's last row)
    constexpr mx_u32 SBW = LAY::BN == 192 ? 32 : 16;      // 2D: bytes of weight scales per kb
    constexpr bool SB1 = !SB2D && LAY::BM == 256;          // the chained wgrad: one 1D row per stage
    const mx_u32 sb_bytes = SB2D ? 4 * SBW : (SB1 ? 512 : 2048);
    mbar_arrive_expect_tx(&full[s.stage], ABYTES + LAY::BN * 128 + sa_rows * 16 + sb_bytes);
    tma_load_2d(dst, &P.tmA, k0, s.row0, &full[s.stage]);
    if (MC == 1) {
      const int h = LAY::BN / 2 * s.crank;   // this CTA's half of B (tensor map box BN / 2 rows)
      tma_load_2d_multicast(dst + LAY::B_OFF + 128 * h, &P.tmB, k0, s.brow + h, &full[s.stage], (mx_u16)3);
    } else if (MC == 2) {                    // (diagnostic v6n: both halves loaded here, no multicast)
      tma_load_2d(dst + LAY::B_OFF, &P.tmB, k0, s.brow, &full[s.stage]);
      tma_load_2d(dst + LAY::B_OFF + 64 * LAY::BN, &P.tmB, k0, s.brow + LAY::BN / 2, &full[s.stage]);
    } else {
      tma_load_2d(dst + LAY::B_OFF, &P.tmB, k0, s.brow, &full[s.stage]);
    }
    if (!MC || sa_rows > 0)
      bulk_load(dst + LAY::SA_OFF, p.SA + (mx_i64)(kb0 >> 2) * p.ldsa + (mx_i64)s.row0 * 4, sa_rows * 16, &full[s.stage]);
    const float* SBexp = p.SB + (mx_i64)s.e * p.sb_es;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if (SB2D) bulk_load(dst + LAY::SB_OFF + SBW * r, SBexp + (mx_i64)(kb0 + r) * p.ldsb + ((s.n0 >> 5) & (SBW == 32 ? ~3 : ~0)), SBW, &full[s.stage]);
      else if (!SB1 || r == 0) bulk_load(dst + LAY::SB_OFF + 512 * r, SBexp + (mx_i64)(kb0 + r) * p.ldsb + s.n0, 512, &full[s.stage]);
    }
    ++s.ks; ++s.pc;
    if (++s.stage == STAGES) { s.stage = 0; s.phase ^= 1; }
  }
}

// One straight-line group of NS stages (4*NS k32 steps), drained at its end.
// MODE 0: each k32 step = two m64n64k32 half-steps into alternating 32-register buffers,
//         half-step q-1 promoted while q runs (wait<1>).
// MODE 1: same half-steps, three rotating buffers, two wgmmas in flight (wait<2>).
// MODE 2: one m64n128k32 per k32 step into two alternating 64-register buffers (wait<1>;
//         spills at 240 registers — kept for reference, not instantiated).
// MODE 3: one m64n128k32 per k32 step into ONE 64-register buffer, wait<0> then promote:
//         serialized within a warpgroup; the other consumer warpgroup's wgmma fills the
//         tensor core meanwhile (anchor variant G, 2 warpgroups per SM).
template <int FA, int FB, int SB2D, int NS, int STAGES, int MODE>
MX_DEV void mxt_group(float* acc, float* ta, float* tb, float* tc, mx_u32 sbase, const mx_u8* sgen,
                      mx_u64* full, mx_u64* empty, int& stage, mx_u32& phase, int wg, int wrow, int lane) {
  constexpr int STAGE = MxtLayout<SB2D>::STAGE;
  constexpr bool N128 = MODE >= 2;
  constexpr int HS = N128 ? 1 : 2;               // wgmmas per k32 step
  constexpr int NQ = 4 * NS * HS;                // wgmmas in the group
  constexpr int LAG = MODE == 1 ? 2 : (MODE == 3 ? 0 : 1);  // promotion lags the issue by LAG wgmmas
  const int st0 = stage;
  const int st1 = (stage + 1 == STAGES) ? 0 : stage + 1;
  mbar_wait(&full[st0], phase);
  if (NS == 2) mbar_wait(&full[st1], st1 == 0 ? (phase ^ 1) : phase);
  const mx_u32 b0 = sbase + st0 * STAGE, b1 = sbase + st1 * STAGE;
#pragma unroll
  for (int q = 0; q < NQ + LAG; ++q) {
    if (q < NQ) {
      const int i = q / HS;                      // k32 step within the group
      const mx_u32 bb = (i < 4 ? b0 : b1) + 32 * (i & 3);
      if (N128) {
        float* cur = (MODE == 2 && (q & 1)) ? tb : ta;
        reg_pin<64>(cur);
        wgmma_fence();
        if (MODE >= 2) wgmma_m64n128k32_inplace<FA, FB>(cur, make_smem_desc_sw128(bb + wg * 8192), make_smem_desc_sw128(bb + 16384));
        else wgmma_m64n128k32<FA, FB>(cur, make_smem_desc_sw128(bb + wg * 8192), make_smem_desc_sw128(bb + 16384));
      } else {
        float* cur = MODE == 1 ? ((q % 3) == 0 ? ta : ((q % 3) == 1 ? tb : tc)) : ((q & 1) ? tb : ta);
        reg_pin<32>(cur);
        wgmma_fence();
        wgmma_m64n64k32<FA, FB>(cur, make_smem_desc_sw128(bb + wg * 8192),
                                make_smem_desc_sw128(bb + 16384 + 8192 * (q & 1)));
      }
      wgmma_commit();
    }
    if (q >= LAG) {
      const int qp = q - LAG;
      const int ip = qp / HS, j = ip & 3;
      // Scales. 2D: volatile ld.shared (kept in place, run 7). 1D: plain loads, which
      // ptxas may schedule early (the volatile form was ~5 % slower for 1D in run 7).
      const mx_u8* gs = sgen + (ip < 4 ? st0 : st1) * STAGE;
      const float* sBg = reinterpret_cast<const float*>(gs + MXT_SB_OFF);
      float s0, s1;
      float4 sb4 = make_float4(0.f, 0.f, 0.f, 0.f);
      if (SB2D) {
        const mx_u32 sA = (ip < 4 ? b0 : b1) + MXT_SA_OFF;
        const mx_u32 sB = (ip < 4 ? b0 : b1) + MXT_SB_OFF;
        s0 = lds_f32(sA + 4 * (wrow * 4 + j)); s1 = lds_f32(sA + 4 * ((wrow + 8) * 4 + j));
        sb4 = lds_f32x4(sB + 16 * j);
      } else {
        const float* sA = reinterpret_cast<const float*>(gs + MXT_SA_OFF);
        s0 = sA[wrow * 4 + j]; s1 = sA[(wrow + 8) * 4 + j];
      }
      // wgmmas issued so far: min(q+1, NQ); qp must be complete.
      const int pend = (q + 1 < NQ ? q + 1 : NQ) - (qp + 1);
      if (pend >= 2) wgmma_wait<2>(); else if (pend == 1) wgmma_wait<1>(); else wgmma_wait<0>();
      if (N128) {
        float* prv = (MODE == 2 && (qp & 1)) ? tb : ta;
        reg_pin<64>(prv);
        mxt_promote<SB2D, 0>(acc, prv, s0, s1, make_float2(sb4.x, sb4.y), sBg + 128 * j, lane);
        mxt_promote<SB2D, 1>(acc, prv + 32, s0, s1, make_float2(sb4.z, sb4.w), sBg + 128 * j, lane);
      } else {
        float* prv = MODE == 1 ? ((qp % 3) == 0 ? ta : ((qp % 3) == 1 ? tb : tc)) : ((qp & 1) ? tb : ta);
        reg_pin<32>(prv);
        if (qp & 1) mxt_promote<SB2D, 1>(acc, prv, s0, s1, make_float2(sb4.z, sb4.w), sBg + 128 * j, lane);
        else        mxt_promote<SB2D, 0>(acc, prv, s0, s1, make_float2(sb4.x, sb4.y), sBg + 128 * j, lane);
      }
      if (NS == 2 && qp == 4 * HS - 1) mbar_arrive_warp(&empty[st0], lane);
    }
  }
  mbar_arrive_warp(&empty[NS == 2 ? st1 : st0], lane);
#pragma unroll
  for (int g = 0; g < NS; ++g) {
    if (++stage == STAGES) { stage = 0; phase ^= 1; }
  }
}
