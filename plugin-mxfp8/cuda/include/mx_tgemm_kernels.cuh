// mx_tgemm_kernels.cuh — the kernel bodies the backend instantiates: mx_tgemm_impl
// (MODE 0/1/3) and mx_tgemm_v2_impl (v2/v2u/v2t, v3 with two stages per group).
// Requires mx_tgemm_mainloop.cuh and mx_tgemm_roles.cuh. NVRTC-clean.
#pragma once

// MODE 0/1/3 kernels (the default mx_tgemm_*). Register fit: like v2, everything a role
// needs is computed inside its branch after setmaxnreg and the padding rows are zeroed by
// the consumers only; before (tile context and tid computed ahead of the role split, live
// across the consumer main loop) the f32-output kernels spilled 16 B and reloaded them
// every group. The main loop and promotion order are unchanged.
template <int FA, int FB, int SB2D, int OUT_BF16, int STAGES, int MODE>
MX_DEV void mx_tgemm_impl(const MxGemmTmaParams& P) {
  const MxGemmParams& p = P.g;
  MXT_RETURN_IF_CHAINED(P)
  MX_DYN_SMEM(mxt_smem, 1024);
  __shared__ __align__(8) mx_u64 full[STAGES], empty[STAGES];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];

  const int tid = threadIdx.x;
  mxt_setup(P, full, empty, STAGES, 8, MXT_BM, g_start, g_pre);

  if (tid >= 256) {
    // ---- producer warpgroup: one thread issues every TMA / bulk copy ----
    setmaxnreg_dec<MODE == 2 ? 24 : 40>();
    if (tid == 256)
      mxt_produce<SB2D, STAGES, 0, MxtLay128<SB2D>>(P, g_start, g_pre, mxt_smem_base(mxt_smem), blockIdx.x, gridDim.x, full, empty);
    return;
  }
  // ---- consumers ----
  setmaxnreg_inc<MODE == 2 ? 240 : 232>();
  const mx_u32 sbase = mxt_smem_base(mxt_smem);
  const mx_u8* sgen = mxt_smem + (sbase - smem_u32(mxt_smem));
  const MxtCtx c = mxt_ctx(p, g_start, g_pre);
  const int wg = tid >> 7;
  const int lt = tid & 127;
  const int warp = lt >> 5, lane = lt & 31;
  const int wrow = 64 * wg + 16 * warp + (lane >> 2);
  int stage = 0; mx_u32 phase = 0;
  float acc[64], t0[MODE >= 2 ? 64 : 32], t1[MODE == 3 ? 1 : (MODE == 2 ? 64 : 32)], t2[MODE == 1 ? 32 : 1];
  mxt_consume<OUT_BF16>(p, c, g_start, g_pre, MXT_BM, blockIdx.x, gridDim.x, acc, wrow, lane, [&](int nst, int) {
    for (; nst >= 2; nst -= 2)
      mxt_group<FA, FB, SB2D, 2, STAGES, MODE>(acc, t0, t1, t2, sbase, sgen, full, empty, stage, phase, wg, wrow, lane);
    if (nst == 1)
      mxt_group<FA, FB, SB2D, 1, STAGES, MODE>(acc, t0, t1, t2, sbase, sgen, full, empty, stage, phase, wg, wrow, lane);
  });

  mxt_zero_padding_rows<OUT_BF16>(p, g_start, tid);
}

// ---- v2 kernel (run 8) ----
// Same launch contract as mx_tgemm_* (384 threads, same dynamic shared memory, same
// parameter struct, same producer mxt_fill). Register fit (ptxas: 0 bytes spill in all four
// instantiations at consumers 232 / producer 40, the default split): acc 64 + 2 x 64
// partials = 192 of 232. Found with ptxas -v / SASS: the same m64n128 double buffer
// spilled ~500 B in MODE 2 (even at 240) because of the second, NS = 1 tail copy of the
// straight-line group: ptxas placed the 64-register buffers differently in the two copies
// and moved accumulators through local memory between them (24 accumulators spilled);
// v2 has one group shape (one stage), which alone removed the consumer spills. With a
// 24-register producer (consumers 240) the producer side still spilled: values computed
// before setmaxnreg and live in both roles, and the padding-row zeroing after the role
// split; v2 computes per role and zeroes padding in the consumers only (kept at 40/232).

#ifndef MXT_V2_PREG
#define MXT_V2_PREG 40   // producer registers; consumers get (504 - MXT_V2_PREG) / 2 = 232
#endif                   // (pool: 168 x 384 = 504 x 128; 24 -> 240 spills in the producer)
// NSG = stages per straight-line group: 1 = v2; 2 = v3 (8 k32 steps per group, tiles padded
// to an even stage count with a zero stage by the producer, see mxt_fill PAD2).
// OPT bits (MXT_OPT_*): DINC and PRESCALE are mxt_group_v2's (see there); with
// MXT_OPT_UWG the warpgroup index is broadcast with a shuffle so the compiler knows it is
// warp-uniform and builds the A-operand wgmma descriptor in the uniform datapath (no
// per-step LEA/SHF/LOP3 + R2UR right before each QGMMA; ncu run 9: 11 % of stall samples
// were "wait" on the QGMMA). Same arithmetic, bit-identical results.
template <int FA, int FB, int SB2D, int OUT_BF16, int STAGES, int NSG = 1, int OPT = 0>
MX_DEV void mx_tgemm_v2_impl(const MxGemmTmaParams& P, const MxTmap* tmO = nullptr) {
  const MxGemmParams& p = P.g;
  MXT_RETURN_IF_CHAINED(P)
  MX_DYN_SMEM(mxt_smem, 1024);
  __shared__ __align__(8) mx_u64 full[STAGES], empty[STAGES];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];

  const int tid = threadIdx.x;
  mxt_setup(P, full, empty, STAGES, 8, MXT_BM, g_start, g_pre);

  if (tid >= 256) {
    // ---- producer warpgroup: one thread issues every TMA / bulk copy ----
    setmaxnreg_dec<MXT_V2_PREG>();
    if (tid == 256)
      mxt_produce<SB2D, STAGES, NSG == 2, MxtLay128<SB2D>, 0, (OPT & MXT_OPT_RESIDENT) != 0>(
          P, g_start, g_pre, mxt_smem_base(mxt_smem), blockIdx.x, gridDim.x, full, empty);
    return;
  }
  // ---- consumers ----
  setmaxnreg_inc<(504 - MXT_V2_PREG) / 2>();
  const mx_u32 sbase = mxt_smem_base(mxt_smem);
  const mx_u8* sgen = mxt_smem + (sbase - smem_u32(mxt_smem));
  const MxtCtx c = mxt_ctx(p, g_start, g_pre);
  const int wg = (OPT & MXT_OPT_UWG) ? __shfl_sync(0xffffffffu, tid >> 7, 0) : tid >> 7;
  const int lt = tid & 127;
  const int warp = lt >> 5, lane = lt & 31;
  const int wrow = 64 * wg + 16 * warp + (lane >> 2);
  int stage = 0; mx_u32 phase = 0;
  float acc[64], t0[64], t1[64];
  constexpr bool TMA = (OPT & MXT_OPT_TMA_STORE) != 0;
  const MxtStore tst{tmO, sbase + STAGES * MxtLay128<SB2D>::STAGE + wg * 16384, wg, lt, wg};
  if ((OPT & MXT_OPT_DELAY1) && wg == 1) __nanosleep(800);
  mxt_consume<OUT_BF16, 64, MXG_BN, !(OPT & MXT_OPT_NO_STORE), TMA>(p, c, g_start, g_pre, MXT_BM, blockIdx.x, gridDim.x, acc, wrow, lane, [&](int nst, int) {
    if (NSG == 2) nst = (nst + 1) & ~1;   // the producer appends a zero stage to odd tiles
    if ((OPT & MXT_OPT_SKEW) && NSG == 1 && wg == 1) {
      if (nst <= 0) return;
      typedef MxtLay128<SB2D> L;
      mxt_group_v2<FA, FB, SB2D, 1, STAGES, L, OPT, 0, 2>(acc, t0, t1, sbase, sgen, full, empty, stage, phase, wg, wrow, lane);
      for (; nst > 1; --nst)
        mxt_group_v2<FA, FB, SB2D, 1, STAGES, L, OPT, 2, 4>(acc, t0, t1, sbase, sgen, full, empty, stage, phase, wg, wrow, lane);
      mxt_group_v2<FA, FB, SB2D, 1, STAGES, L, OPT, 2, 2>(acc, t0, t1, sbase, sgen, full, empty, stage, phase, wg, wrow, lane);
      return;
    }
    for (; nst >= NSG; nst -= NSG)
      mxt_group_v2<FA, FB, SB2D, NSG, STAGES, MxtLay128<SB2D>, OPT>(acc, t0, t1, sbase, sgen, full, empty, stage, phase, wg, wrow, lane);
  }, TMA ? &tst : nullptr);

  mxt_zero_padding_rows<OUT_BF16>(p, g_start, tid);
}
