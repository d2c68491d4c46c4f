// mx_gemm_variants.cuh — HARNESS ONLY (bench/launch.cu, included after ../mx_grouped_gemm.cu):
// the grouped-GEMM variants that lost an A/B (v5: 128 x 192 tiles; v4: two 64-row rings; v6:
// v4's rings in a 2-CTA cluster with B multicast) and the opt-in instantiation lists of
// v2/v3/v4/v5/v6, each behind the macro launch.cu defines for it. The backend never
// compiles this file.
#pragma once

// ---- v5 kernel: 128 x 192 tiles, one m64n192k32 per k32 step, promotion serialized ----
// Why: per k32 step and warpgroup, v2u issues ~100 instructions (64 FFMA) for 64 tensor-core
// cycles and one warpgroup-collective QGMMA per 64 x 128 x 32 (ncu run 16: the QGMMA's
// warpgroup_arrive is the largest stall). An n192 step has 96 FFMA + 12 FMUL for 96 tensor
// cycles and 1.5x the work per QGMMA, stage barrier and epilogue, and the 128 x 192 tile
// moves 17 % fewer L2 -> shared bytes per FLOP. 96 accumulators + 96 partials leave no room
// for a second partial buffer, so each warpgroup waits for its own wgmma (wait<0>) and the
// other warpgroup's wgmma keeps the tensor core busy meanwhile (the anchors' tile sweep:
// n192 serialized 865 TFLOP/s vs n128 serialized 701, operands in shared memory).
// Promotion order per output is v2u's (per k32 step, acc += partial * (s_a * s_b)), so
// results equal v2u's bit for bit as long as the tensor core's k32 partial does not depend
// on the wgmma N.
template <int FA, int FB, int STAGES>
MX_DEV void mxt_group_n192(float* acc, float* tp, mx_u32 sbase, mx_u64* full, mx_u64* empty, int& stage,
                           mx_u32& phase, int wg, int wrow, int sbsh, int lane) {
  typedef MxtLay192<1> L;
  mbar_wait(&full[stage], phase);
  const mx_u32 b0 = sbase + stage * L::STAGE;
  const float4 sa0 = lds_f32x4(b0 + L::SA_OFF + 16 * wrow);
  const float4 sa1 = lds_f32x4(b0 + L::SA_OFF + 16 * (wrow + 8));
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    reg_pin<96>(tp);
    wgmma_fence();
    wgmma_m64n192k32_inplace<FA, FB>(tp, make_smem_desc_sw128(b0 + 32 * j + wg * L::A_WG),
                                     make_smem_desc_sw128(b0 + 32 * j + L::B_OFF));
    wgmma_commit();
    // this step's six column-block scales (the window starts sbsh blocks before the tile)
    const mx_u32 sw = b0 + L::SB_OFF + 32 * j + 4 * sbsh;
    const float2 w01 = lds_f32x2(sw), w23 = lds_f32x2(sw + 8), w45 = lds_f32x2(sw + 16);
    const float sbv[6] = {w01.x, w01.y, w23.x, w23.y, w45.x, w45.y};
    const float s0 = j == 0 ? sa0.x : (j == 1 ? sa0.y : (j == 2 ? sa0.z : sa0.w));
    const float s1 = j == 0 ? sa1.x : (j == 1 ? sa1.y : (j == 2 ? sa1.z : sa1.w));
    wgmma_wait<0>();
    reg_pin<96>(tp);
#pragma unroll
    for (int cb = 0; cb < 6; ++cb) {
      const float p0 = s0 * sbv[cb], p1 = s1 * sbv[cb];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int q = (cb * 4 + jj) * 4;
        acc[q + 0] = fmaf(tp[q + 0], p0, acc[q + 0]);
        acc[q + 1] = fmaf(tp[q + 1], p0, acc[q + 1]);
        acc[q + 2] = fmaf(tp[q + 2], p1, acc[q + 2]);
        acc[q + 3] = fmaf(tp[q + 3], p1, acc[q + 3]);
      }
    }
  }
  if (lane == 0) mbar_arrive(&empty[stage]);
  if (++stage == STAGES) { stage = 0; phase ^= 1; }
}

// Launch: 384 threads, mxt5_smem_bytes() of dynamic shared memory, and a B tensor map whose
// box is 128 B x 192 rows (A's stays 128 x 128); the weight-scale table needs
// ldsb >= roundup(NB, 4) + 4 (MxtLay192). Same parameters as mx_tgemm_*.
#ifndef MXT5_STAGES
#define MXT5_STAGES 5
#endif
constexpr int mxt5_smem_bytes() { return MXT5_STAGES * MxtLay192<1>::STAGE + 1024; }

template <int FA, int FB, int OUT_BF16>
MX_DEV void mx_tgemm_v5_impl(const MxGemmTmaParams& P) {
  typedef MxtLay192<1> L;
  constexpr int STAGES = MXT5_STAGES;
  const MxGemmParams& p = P.g;
  extern __shared__ __align__(1024) mx_u8 mxt_smem[];
  __shared__ __align__(8) mx_u64 full[STAGES], empty[STAGES];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];

  const int tid = threadIdx.x;
  mxt_setup(P, full, empty, STAGES, 8, L::BM, g_start, g_pre);

  if (tid >= 256) {
    setmaxnreg_dec<MXT_V2_PREG>();
    if (tid == 256)
      mxt_produce<1, STAGES, 0, L>(P, g_start, g_pre, mxt_smem_base(mxt_smem), blockIdx.x, gridDim.x, full, empty);
    return;
  }
  setmaxnreg_inc<(504 - MXT_V2_PREG) / 2>();
  const mx_u32 sbase = mxt_smem_base(mxt_smem);
  const MxtCtx c = mxt_ctx(p, g_start, g_pre, L::BM, L::BN);
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  const int lt = tid & 127;
  const int warp = lt >> 5, lane = lt & 31;
  const int wrow = 64 * wg + 16 * warp + (lane >> 2);
  int stage = 0; mx_u32 phase = 0;
  float acc[96], tp[96];
  mxt_consume<OUT_BF16, 96, 192>(p, c, g_start, g_pre, L::BM, blockIdx.x, gridDim.x, acc, wrow, lane,
                                 [&](int nst, int sbsh) {
    for (; nst >= 1; --nst)
      mxt_group_n192<FA, FB, STAGES>(acc, tp, sbase, full, empty, stage, phase, wg, wrow, sbsh, lane);
  });

  mxt_zero_padding_rows<OUT_BF16>(p, g_start, tid);
}

#define MXT_INST_V5(NAME, FA, FB, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_v5_impl<FA, FB, OBF>(p); }

// ---- v8c (run 92, DIAGNOSTIC like v2c: exact only for stage-uniform block scales) ----
// The backend's chained GEMM (../include/mx_tgemm_chain.cuh) without the residual corrections.
#define MXT_INST_V8C(NAME, FA, FB, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_chain_impl<FA, FB, 1, OBF>(p, nullptr); }
MXT_INST_V8C(mx_tgemm_e4m3e4m3_w2d_bf16_v8c, 0, 0, 1)
MXT_INST_V8C(mx_tgemm_e4m3e4m3_w2d_f32_v8c,  0, 0, 0)

// ---- v4 kernel: two independent 64-row rings, one per consumer warpgroup ----
// Same 384-thread CTA, parameter struct and main loop (mxt_group_v2) as v2u, but the two
// consumer warpgroups no longer share a stage: warpgroup w owns ring w (MXT4_STAGES stages
// of MxtLay64: A 64 rows, B 128 columns), fed by its own producer thread (lane 0 of warp
// 8 + w), and walks its own sequence of 64 x 128 tiles (virtual worker 2 * blockIdx.x + w,
// stride 2 * gridDim.x). Why: in v2 both warpgroups wait on the same stages and finish
// their tiles together, so every epilogue and pipeline restart leaves the tensor core
// idle; decoupled, one warpgroup's epilogue overlaps the other's main loop. Cost: B is
// loaded once per 64 rows instead of 128 (1.5x the L2 -> shared bytes per FLOP). The A
// tensor map's box is 128 B x 64 rows (B's stays 128 x 128). Per-output arithmetic is
// v2's (same wgmma shape, same promotion order), so results are bitwise v2's.
#ifndef MXT4_STAGES
#define MXT4_STAGES 4
#endif
template <int SB2D> constexpr int mxt4_smem_bytes() { return 2 * MXT4_STAGES * MxtLay64<SB2D>::STAGE + 1024; }


// ---- v6 kernel: v4's decoupled rings with B shared by a 2-CTA cluster (TMA multicast) ----
// v4 decoupled the two consumer warpgroups of an SM (separate rings, separate tiles: the
// QGMMA warpgroup_arrive stall share fell from 17.8 to 10.0 %, ncu run 16) but loaded every B
// tile once per 64 rows, 1.5x v2u's L2 -> shared bytes, and lost 2-12 % on the memory side
// (L2 73.6 %, long-scoreboard stalls 2.5x). Here the CTAs come in clusters of 2 (on two SMs)
// that share 128 x 128 tiles: warpgroup w of CTA r computes rows 64r .. 64r + 63 of the
// cluster's w-th tile sequence (tiles 2q + w, step 2 * clusters), its producer loads those 64
// rows of A and, multicast to both CTAs, half of the tile's B; so each SM moves v2u's bytes
// per FLOP while its two warpgroups stay independent of each other (each is coupled only to
// its peer on the other SM, through the ring slots they share). empty[] counts both CTAs'
// four consumer warps; the producer waits on its own empty[] before multicasting into both.
// Same wgmma shape and promotion order as v2u: bitwise-identical results. Launch: 384 threads,
// grid = 2 * (clusters that fit at once), mxt6_smem_bytes<SB2D, ST, TMA>() of dynamic shared
// memory; A and B tensor maps with boxes of 128 B x 64 rows; TMA: the v2t output map.
// Result (docs/perf.md runs 61-63, 65): bitwise identical to v2u, 2-5 % slower than v2t (v6t)
// and 3-8 % slower than v2u (v6), so it stays in the harness.
template <int SB2D, int ST, bool TMA> constexpr int mxt6_smem_bytes() {
  return 2 * ST * MxtLay64<SB2D>::STAGE + (TMA ? 2 * 16384 : 0) + 1024;
}

// The kernel body of v4 (MC = 0: no cluster, 64-row tiles, each CTA on its own) and v6
// (MC = 1; MC = 2: the diagnostic v6n). CL = CTAs per cluster.
template <int FA, int FB, int SB2D, int OUT_BF16, int ST, bool TMA, int MC>
MX_DEV void mx_tgemm_rings_impl(const MxGemmTmaParams& P, const MxTmap* tmO) {
  typedef MxtLay64<SB2D> LAY;
  constexpr int CL = MC ? 2 : 1;
  constexpr int RING = ST * LAY::STAGE;
  const MxGemmParams& p = P.g;
  extern __shared__ __align__(1024) mx_u8 mxt_smem[];
  __shared__ __align__(8) mx_u64 full[2 * ST], empty[2 * ST];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];

  const int tid = threadIdx.x;
  mxt_setup(P, full, empty, 2 * ST, 4 * CL, CL * LAY::BM, g_start, g_pre);
  if (CL == 2) cluster_sync();  // the peer's barriers exist before any multicast or remote arrive reaches them
  const int cr = CL == 2 ? (int)cluster_ctarank() : 0;
  const int q = (int)blockIdx.x / CL, nq = (int)gridDim.x / CL;
  if (tid >= 256) {
    // ---- producers: lane 0 of warp 8 fills ring 0, lane 0 of warp 9 ring 1 ----
    setmaxnreg_dec<MXT_V2_PREG>();
    if (tid == 256 || tid == 288) {
      const int ring = (tid - 256) >> 5;
      mxt_produce<SB2D, ST, 0, LAY, MC>(P, g_start, g_pre, mxt_smem_base(mxt_smem) + ring * RING, 2 * q + ring, 2 * nq,
                                       full + ring * ST, empty + ring * ST, cr);
    }
  } else {
    // ---- consumers: warpgroup wg works ring wg only, half cr of each tile ----
    setmaxnreg_inc<(504 - MXT_V2_PREG) / 2>();
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const mx_u32 sbase = mxt_smem_base(mxt_smem) + wg * RING;
    const mx_u8* sgen = mxt_smem + (sbase - smem_u32(mxt_smem));
    const MxtCtx c = mxt_ctx(p, g_start, g_pre, CL * LAY::BM);
    const int lt = tid & 127;
    const int warp = lt >> 5, lane = lt & 31;
    const int wrow = 16 * warp + (lane >> 2);
    mx_u64* fullr = full + wg * ST;
    mx_u64* emptyr = empty + wg * ST;
    int stage = 0; mx_u32 phase = 0;
    float acc[64], t0[64], t1[64];
    const MxtStore tst{tmO, mxt_smem_base(mxt_smem) + 2 * RING + wg * 16384, wg, lt, 0};
    mxt_consume<OUT_BF16, 64, MXG_BN, true, TMA>(p, c, g_start, g_pre, CL * LAY::BM, 2 * q + wg, 2 * nq, acc, wrow, lane,
                                                 [&](int nst, int) {
      for (; nst >= 1; --nst)
        mxt_group_v2<FA, FB, SB2D, 1, ST, LAY, CL == 2 ? MXT_OPT_CLUSTER : 0>(acc, t0, t1, sbase, sgen, fullr, emptyr, stage, phase, 0, wrow, lane);
    }, TMA ? &tst : nullptr, CL == 2 ? cr : -1);
    mxt_zero_padding_rows<OUT_BF16>(p, g_start, tid);
  }
  if (CL == 2) {
    __syncwarp();
    cluster_sync();  // no CTA exits while its peer may still arrive on its barriers
  }
}

// ---- v7 (run 80): v2t's CTA in a 2-CTA cluster sharing B between two full 128-row tiles ----
// Why: run 79 measured that the L2 -> shared traffic, not the schedule, holds v2u at the power
// cap (operands resident: +18 %, at the maximum clock). The CTAs of a cluster take the two
// 128-row halves of a 256 x 128 tile pair (same expert, same n0): each loads its own A rows
// (128 x 128 B per stage) and one 64-row half of B multicast to both, so a CTA reads 6 KB
// from L2 per k32 step instead of 8 (a quarter less per FLOP; v6 halved a shared 128-row
// tile instead, which kept the bytes per SM). The consumers run v2t's main loop and
// epilogue unchanged, releasing each stage to both producers (empty[] counts 16 warps).
template <int FA, int FB, int SB2D, int OUT_BF16, int ST, int XOPT = 0>
MX_DEV void mx_tgemm_pair_impl(const MxGemmTmaParams& P, const MxTmap* tmO) {
  typedef MxtLay128<SB2D> LAY;
  const MxGemmParams& p = P.g;
  extern __shared__ __align__(1024) mx_u8 mxt_smem[];
  __shared__ __align__(8) mx_u64 full[ST], empty[ST];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];
  const int tid = threadIdx.x;
  mxt_setup(P, full, empty, ST, 16, 2 * LAY::BM, g_start, g_pre);
  cluster_sync();  // the peer's barriers exist before any multicast or remote arrive reaches them
  const int cr = (int)cluster_ctarank();
  const int q = (int)blockIdx.x / 2, nq = (int)gridDim.x / 2;
  if (tid >= 256) {
    setmaxnreg_dec<MXT_V2_PREG>();
    if (tid == 256)
      mxt_produce<SB2D, ST, 0, LAY, 1>(P, g_start, g_pre, mxt_smem_base(mxt_smem), q, nq, full, empty, cr);
  } else {
    setmaxnreg_inc<(504 - MXT_V2_PREG) / 2>();
    const mx_u32 sbase = mxt_smem_base(mxt_smem);
    const mx_u8* sgen = mxt_smem + (sbase - smem_u32(mxt_smem));
    const MxtCtx c = mxt_ctx(p, g_start, g_pre, 2 * LAY::BM);
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const int lt = tid & 127;
    const int warp = lt >> 5, lane = lt & 31;
    const int wrow = 64 * wg + 16 * warp + (lane >> 2);
    int stage = 0; mx_u32 phase = 0;
    float acc[64], t0[64], t1[64];
    const MxtStore tst{tmO, sbase + ST * LAY::STAGE + wg * 16384, wg, lt, wg};
    mxt_consume<OUT_BF16, 64, MXG_BN, true, true>(p, c, g_start, g_pre, 2 * LAY::BM, q, nq, acc, wrow, lane, [&](int nst, int) {
      for (; nst >= 1; --nst)
        mxt_group_v2<FA, FB, SB2D, 1, ST, LAY, MXT_OPT_UWG | MXT_OPT_CLUSTER | XOPT>(acc, t0, t1, sbase, sgen, full, empty, stage, phase, wg, wrow, lane);
    }, &tst, cr, LAY::BM);
    mxt_zero_padding_rows<OUT_BF16>(p, g_start, tid);
  }
  __syncwarp();
  cluster_sync();  // no CTA exits while its peer may still multicast into it or arrive on its barriers
}
// Launch: as v2t (MxGemmTmaParamsO, mxt_v2t_smem_bytes), a B tensor map box of 64 rows, an
// even grid of 2-CTA clusters.
#define MXT_INST_V7(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { mx_tgemm_pair_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES>(p.b, p.o_tma ? &p.tmO : nullptr); }

// mx_tgemm_<...>_v6 / _v6t (see mx_tgemm_rings_impl): parameters MxGemmTmaParamsO (v6: the
// output map unused), a cluster of 2 CTAs fixed at compile time (a plain launch works; the
// grid must be even).
#ifndef MXT6_STAGES
#define MXT6_STAGES 4   // register epilogue
#endif
#ifndef MXT6T_STAGES
#define MXT6T_STAGES 3  // TMA-store epilogue (32 KB of staging)
#endif
#define MXT_INST_V6(NAME, FA, FB, SB2D, OBF, ST, TMA, MC) \
  extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { mx_tgemm_rings_impl<FA, FB, SB2D, OBF, ST, TMA, MC>(p.b, p.o_tma ? &p.tmO : nullptr); }
// mx_tgemm_<...>_v4: launch with 384 threads, mxt4_smem_bytes<SB2D>() bytes of dynamic shared
// memory and an A tensor map whose box is 128 B x 64 rows.
#define MXT_INST_V4(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_rings_impl<FA, FB, SB2D, OBF, MXT4_STAGES, false, 0>(p, nullptr); }

// v2 kernels (run 8), opt-in: define MXT_INSTANTIATE_V2 (bench/launch.cu and
// bench/nvrtc_check.py do). Same parameters and launch as the mx_tgemm_* of the same name.
#ifdef MXT_INSTANTIATE_V2
MXT_INST_V2(mx_tgemm_e4m3e4m3_w2d_bf16_v2, 0, 0, 1, 1, 6)
MXT_INST_V2(mx_tgemm_e4m3e4m3_w2d_f32_v2,  0, 0, 1, 0, 6)
MXT_INST_V2(mx_tgemm_e4m3e4m3_w1d_bf16_v2, 0, 0, 0, 1, 6)
MXT_INST_V2(mx_tgemm_e4m3e4m3_w1d_f32_v2,  0, 0, 0, 0, 6)
MXT_INST_V2U(mx_tgemm_e4m3e4m3_w2d_bf16_v2u, 0, 0, 1, 1, 6)
MXT_INST_V2U(mx_tgemm_e4m3e4m3_w2d_f32_v2u,  0, 0, 1, 0, 6)
MXT_INST_V2U(mx_tgemm_e4m3e4m3_w1d_bf16_v2u, 0, 0, 0, 1, 6)
MXT_INST_V2U(mx_tgemm_e4m3e4m3_w1d_f32_v2u,  0, 0, 0, 0, 6)
MXT_INST_V2D(mx_tgemm_e4m3e4m3_w2d_bf16_v2d, 0, 0, 1, 1, 6)
MXT_INST_V2D(mx_tgemm_e4m3e4m3_w2d_f32_v2d,  0, 0, 1, 0, 6)
MXT_INST_V2D(mx_tgemm_e4m3e4m3_w1d_bf16_v2d, 0, 0, 0, 1, 6)
MXT_INST_V2D(mx_tgemm_e4m3e4m3_w1d_f32_v2d,  0, 0, 0, 0, 6)
MXT_INST_V2P(mx_tgemm_e4m3e4m3_w2d_bf16_v2p, 0, 0, 1, 1, 6)
MXT_INST_V2P(mx_tgemm_e4m3e4m3_w2d_f32_v2p,  0, 0, 1, 0, 6)
MXT_INST_V2O(mx_tgemm_e4m3e4m3_w2d_bf16_v2o, 0, 0, 1, 1, 6)
MXT_INST_V2O(mx_tgemm_e4m3e4m3_w2d_f32_v2o,  0, 0, 1, 0, 6)
MXT_INST_V2O(mx_tgemm_e4m3e4m3_w1d_bf16_v2o, 0, 0, 0, 1, 6)
MXT_INST_V2O(mx_tgemm_e4m3e4m3_w1d_f32_v2o,  0, 0, 0, 0, 6)
MXT_INST_V2N(mx_tgemm_e4m3e4m3_w2d_bf16_v2n, 0, 0, 1, 1, 6)
MXT_INST_V2E(mx_tgemm_e4m3e4m3_w2d_bf16_v2e, 0, 0, 1, 1, 6)
// v2r / v2re (diagnostics, wrong results, run 79): v2u / v2e with operands resident in shared
// memory after the ring's first fill (MXT_OPT_RESIDENT).
MXT_INST_V2_OPT(mx_tgemm_e4m3e4m3_w2d_bf16_v2r, 0, 0, 1, 1, 6, MXT_OPT_UWG | MXT_OPT_RESIDENT)
MXT_INST_V2_OPT(mx_tgemm_e4m3e4m3_w2d_bf16_v2re, 0, 0, 1, 1, 6, MXT_OPT_UWG | MXT_OPT_RESIDENT | MXT_OPT_NO_STORE)
MXT_INST_V2T(mx_tgemm_e4m3e4m3_w2d_bf16_v2t, 0, 0, 1, 1)
MXT_INST_V2T(mx_tgemm_e4m3e4m3_w2d_f32_v2t,  0, 0, 1, 0)
MXT_INST_V2T(mx_tgemm_e4m3e4m3_w1d_bf16_v2t, 0, 0, 0, 1)
MXT_INST_V2T(mx_tgemm_e4m3e4m3_w1d_f32_v2t,  0, 0, 0, 0)
// v2w (run 82): v2t with write-only partial buffers (MXT_OPT_WONLY). Launch as v2t.
#define MXT_INST_V2W(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { \
    mx_tgemm_v2_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, 1, MXT_OPT_UWG | MXT_OPT_TMA_STORE | MXT_OPT_WONLY>(p.b, p.o_tma ? &p.tmO : nullptr); }
MXT_INST_V2W(mx_tgemm_e4m3e4m3_w2d_bf16_v2w, 0, 0, 1, 1)
MXT_INST_V2W(mx_tgemm_e4m3e4m3_w2d_f32_v2w,  0, 0, 1, 0)
MXT_INST_V2W(mx_tgemm_e4m3e4m3_w1d_bf16_v2w, 0, 0, 0, 1)
MXT_INST_V2W(mx_tgemm_e4m3e4m3_w1d_f32_v2w,  0, 0, 0, 0)
// v2c (run 89, DIAGNOSTIC: exact only for operands whose block scales are uniform across each
// 128-deep stage): v2t with each stage's four k32 steps chained in the tensor core and promoted
// once (MXT_OPT_CHAIN). Launch as v2t.
#define MXT_INST_V2C(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { \
    mx_tgemm_v2_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, 1, MXT_OPT_UWG | MXT_OPT_TMA_STORE | MXT_OPT_CHAIN>(p.b, p.o_tma ? &p.tmO : nullptr); }
#define MXT_INST_V2T_OPT(NAME, FA, FB, SB2D, OBF, XOPT) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { \
    mx_tgemm_v2_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, 1, MXT_OPT_UWG | MXT_OPT_TMA_STORE | (XOPT)>(p.b, p.o_tma ? &p.tmO : nullptr); }
#define MXT_INST_V3C(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { \
    mx_tgemm_v2_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, 2, MXT_OPT_UWG | MXT_OPT_TMA_STORE | MXT_OPT_CHAIN>(p.b, p.o_tma ? &p.tmO : nullptr); }
MXT_INST_V2C(mx_tgemm_e4m3e4m3_w2d_bf16_v2c, 0, 0, 1, 1)
MXT_INST_V2C(mx_tgemm_e4m3e4m3_w2d_f32_v2c,  0, 0, 1, 0)
// v2rc (run 92, diagnostic, wrong results): v2c with operands resident in shared memory after
// the ring's first fill (MXT_OPT_RESIDENT): v2c without the L2 -> shared traffic.
MXT_INST_V2T_OPT(mx_tgemm_e4m3e4m3_w2d_bf16_v2rc, 0, 0, 1, 1, MXT_OPT_CHAIN | MXT_OPT_RESIDENT)
// v3c (run 91, diagnostic as v2c): two stages per group (v3t's zero-stage padding of odd
// tiles), stage 1's chain issued before stage 0's sum is promoted. Launch as v2t.
MXT_INST_V3C(mx_tgemm_e4m3e4m3_w2d_bf16_v3c, 0, 0, 1, 1)
MXT_INST_V3C(mx_tgemm_e4m3e4m3_w2d_f32_v3c,  0, 0, 1, 0)
// v2s (run 86): v2t with warpgroup 1 started ~0.8 us late (MXT_OPT_DELAY1). Launch as v2t.
#define MXT_INST_V2S(NAME, FA, FB, SB2D, OBF, NSG) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { \
    mx_tgemm_v2_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, NSG, MXT_OPT_UWG | MXT_OPT_TMA_STORE | MXT_OPT_DELAY1>(p.b, p.o_tma ? &p.tmO : nullptr); }
MXT_INST_V2S(mx_tgemm_e4m3e4m3_w2d_bf16_v2s, 0, 0, 1, 1, 1)
MXT_INST_V2S(mx_tgemm_e4m3e4m3_w2d_f32_v2s,  0, 0, 1, 0, 1)
#endif

// v3 kernels, opt-in: define MXT_INSTANTIATE_V3 (bench/launch.cu does).
#ifdef MXT_INSTANTIATE_V3
MXT_INST_V3(mx_tgemm_e4m3e4m3_w2d_bf16_v3, 0, 0, 1, 1, 6)
MXT_INST_V3(mx_tgemm_e4m3e4m3_w2d_f32_v3,  0, 0, 1, 0, 6)
MXT_INST_V3(mx_tgemm_e4m3e4m3_w1d_bf16_v3, 0, 0, 0, 1, 6)
MXT_INST_V3(mx_tgemm_e4m3e4m3_w1d_f32_v3,  0, 0, 0, 0, 6)
// v3t (run 81): v2t (warp-uniform warpgroup index, TMA-store epilogue, 5 stages) with v3's
// 8-step groups (odd tiles padded with a zero stage, as v3). Launch and parameters as v2t.
// Bit-identical to v2u / v2t; 7 % slower than v2t on a, b and 22 % on c (run 81). (Ending odd
// tiles with a one-stage group instead spilled 400-560 B as a second group shape, and
// 140-370 B + C7514 as a run-time early exit.)
#define MXT_INST_V3T(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { \
    mx_tgemm_v2_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, 2, MXT_OPT_UWG | MXT_OPT_TMA_STORE>(p.b, p.o_tma ? &p.tmO : nullptr); }
MXT_INST_V3T(mx_tgemm_e4m3e4m3_w2d_bf16_v3t, 0, 0, 1, 1)
MXT_INST_V3T(mx_tgemm_e4m3e4m3_w2d_f32_v3t,  0, 0, 1, 0)
MXT_INST_V3T(mx_tgemm_e4m3e4m3_w1d_bf16_v3t, 0, 0, 0, 1)
MXT_INST_V3T(mx_tgemm_e4m3e4m3_w1d_f32_v3t,  0, 0, 0, 0)
// v3s (run 86): v3t with warpgroup 1 started ~0.8 us late (MXT_OPT_DELAY1; macro beside v2w).
MXT_INST_V2S(mx_tgemm_e4m3e4m3_w2d_bf16_v3s, 0, 0, 1, 1, 2)
MXT_INST_V2S(mx_tgemm_e4m3e4m3_w2d_f32_v3s,  0, 0, 1, 0, 2)
#endif

// v5 kernels (128 x 192 tiles), opt-in: define MXT_INSTANTIATE_V5 (bench/launch.cu does).
#ifdef MXT_INSTANTIATE_V5
MXT_INST_V5(mx_tgemm_e4m3e4m3_w2d_bf16_v5, 0, 0, 1)
MXT_INST_V5(mx_tgemm_e4m3e4m3_w2d_f32_v5,  0, 0, 0)
#endif

// v6 kernels, opt-in: define MXT_INSTANTIATE_V6 (bench/launch.cu does).
#ifdef MXT_INSTANTIATE_V6
MXT_INST_V6(mx_tgemm_e4m3e4m3_w2d_bf16_v6, 0, 0, 1, 1, MXT6_STAGES, false, 1)
MXT_INST_V6(mx_tgemm_e4m3e4m3_w2d_f32_v6,  0, 0, 1, 0, MXT6_STAGES, false, 1)
MXT_INST_V6(mx_tgemm_e4m3e4m3_w2d_bf16_v6t, 0, 0, 1, 1, MXT6T_STAGES, true, 1)
MXT_INST_V6(mx_tgemm_e4m3e4m3_w2d_f32_v6t,  0, 0, 1, 0, MXT6T_STAGES, true, 1)
// diagnostic: v6 without the multicast (each CTA loads the whole B), still cluster-coupled
MXT_INST_V6(mx_tgemm_e4m3e4m3_w2d_bf16_v6n, 0, 0, 1, 1, MXT6_STAGES, false, 2)
MXT_INST_V6(mx_tgemm_e4m3e4m3_w2d_f32_v6n,  0, 0, 1, 0, MXT6_STAGES, false, 2)
#endif
// v7 kernels, opt-in: define MXT_INSTANTIATE_V7 (bench/launch.cu does).
#ifdef MXT_INSTANTIATE_V7
MXT_INST_V7(mx_tgemm_e4m3e4m3_w2d_bf16_v7t, 0, 0, 1, 1)
MXT_INST_V7(mx_tgemm_e4m3e4m3_w2d_f32_v7t,  0, 0, 1, 0)
// v7c (run 90, DIAGNOSTIC like v2c: exact only for stage-uniform block scales): v7t's cluster
// pair (B shared by two 128-row tiles: 25 % fewer L2 -> shared bytes per FLOP) with v2c's
// chained stages. Launch as v7t.
#define MXT_INST_V7C(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { mx_tgemm_pair_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, MXT_OPT_CHAIN>(p.b, p.o_tma ? &p.tmO : nullptr); }
MXT_INST_V7C(mx_tgemm_e4m3e4m3_w2d_bf16_v7c, 0, 0, 1, 1)
MXT_INST_V7C(mx_tgemm_e4m3e4m3_w2d_f32_v7c,  0, 0, 1, 0)
#endif
// v4 kernels, opt-in: define MXT_INSTANTIATE_V4 (bench/launch.cu does).
#ifdef MXT_INSTANTIATE_V4
MXT_INST_V4(mx_tgemm_e4m3e4m3_w2d_bf16_v4, 0, 0, 1, 1)
MXT_INST_V4(mx_tgemm_e4m3e4m3_w2d_f32_v4,  0, 0, 1, 0)
#endif
