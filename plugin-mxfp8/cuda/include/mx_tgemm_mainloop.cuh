// mx_tgemm_mainloop.cuh — the v2 main loop of the TMA GEMM (one m64n128k32 per k32 step,
// promotion of the previous step overlapping the next wgmma) and its MXT_OPT_* bits.
// Requires mx_tgemm_pipeline.cuh. NVRTC-clean.
#pragma once

// v2 main loop (run 8): one m64n128k32 per k32 step into two alternating 64-register
// buffers written in place (scale-d = 0); step i+1's wgmma is issued before step i is
// promoted (wait<1>), so the tensor core works on i+1 while the warpgroup's FFMAs promote
// i. One straight-line group per stage (4 k32 steps), drained at its end (no wgmma in
// flight across a loop back-edge: no C7514). Per k32 step: 1 wgmma (MODE 0: 2), one 16-byte
// weight-scale load; the stage's A-row scales (kb 0..3 of rows wrow and wrow+8, stage-major
// table) are two 16-byte loads per stage instead of two 4-byte loads per step. SASS of the
// w2d step: 1 QGMMA, 64 FFMA, ~11 FMUL, ~8 other (MODE 0: ~96 instructions per k32 step).
// Promotion per k32 step is MODE 0's: columns 0-63 then 64-127, the same products
// s_a * s_b, the same FFMAs in the same k order, so the results equal MODE 0's bit for bit
// as long as the tensor core's k32 partial of an output does not depend on the wgmma N
// (n128 here, n64 in MODE 0); bench.py reports the bitwise comparison.
// Options (OPT bits; mx_tgemm_v2_impl passes its own, see there):
// MXT_OPT_DINC: each operand's wgmma descriptor is built once per stage and stepped by
//   adding 2 (= 32 bytes >> 4) to its 32-bit address word per k32 step, instead of being
//   rebuilt from the byte address (mask, shift, or) before every wgmma: the same
//   descriptors (a stage lies below 2^18 bytes, so the 14-bit address field never
//   carries), one uniform add per operand and step instead of ~5 dependent uniform ops
//   (ncu run 16: "wait" stalls on that chain just before each QGMMA). Run 17: no gain.
// MXT_OPT_PRESCALE (32x32 weights): the stage's scales (A rows kb 0..3 and the four
//   steps' weight-column-block scales, 6 x 16 bytes) are loaded into registers before the
//   group's first wgmma, instead of each step's weight scales right before its promotion
//   (ncu run 16: short-scoreboard stalls on the first FMUL after that load). 12 more live
//   registers; same values, same arithmetic.
#define MXT_OPT_UWG 1
#define MXT_OPT_DINC 2
#define MXT_OPT_PRESCALE 4
// MXT_OPT_SKEW (NSG = 1): consumer warpgroup 1 runs its straight-line groups two k32 steps
//   out of phase with warpgroup 0 (a 2-step head group, 4-step groups straddling two
//   stages, a 2-step tail), so the two warpgroups no longer drain (promote a step with no
//   wgmma of their own in flight) at the same moment at every stage end. Same steps, same
//   promotion order per output: bit-identical results.
#define MXT_OPT_SKEW 8
// MXT_OPT_NO_PROMOTE (diagnostic only, WRONG results: acc stays 0): the same wgmmas, waits,
//   scale loads and barriers, without the promotion FFMAs, to measure what the promotion
//   costs in time and power (bench/power.py, run 24).
#define MXT_OPT_NO_PROMOTE 16
// MXT_OPT_NO_STORE (diagnostic only, WRONG results: the output is never written): v2u with
//   the epilogue's stores skipped (kept in the code behind a run-time false condition).
#define MXT_OPT_NO_STORE 32
// MXT_OPT_TMA_STORE (v2t): full 128-row tiles of a bf16 output are stored through shared
//   memory and TMA (mxt_epilogue_tma), overlapping the next tile's main loop. Needs the
//   MxGemmTmaParamsO parameters, 5 stages and 32 KB of staging after them (mxt_v2t_smem_bytes).
#define MXT_OPT_TMA_STORE 64
// MXT_OPT_CLUSTER (v6): a released stage is also signalled to the peer CTA of the 2-CTA
//   cluster (its producer multicasts into this CTA's copy of the stage as well).
#define MXT_OPT_CLUSTER 128
// MXT_OPT_RESIDENT (diagnostic only, WRONG results): the producer fills the ring once; every
//   later stage is released to the consumers by a plain arrive on full[] with no TMA or bulk
//   copy, so the consumers run the same waits, wgmmas, promotions and epilogue on operands
//   that stay resident in shared memory (no L2 -> shared traffic), as the anchors' main-loop
//   microbenchmark does (docs/perf.md run 79).
#define MXT_OPT_RESIDENT 256
// MXT_OPT_WONLY (v2w, run 82): each wgmma's partial buffer is a write-only ("=f") operand and
//   is not pinned before the wgmma, as in the anchors' main loop (mx_mainloop_overlap.cu F):
//   ptxas may then write a promotion's FFMA results into the partial's own registers and
//   give the next wgmma the registers the accumulators left, so that wgmma can issue before
//   the promotion ends (F's SASS: the next QGMMA after ~40 of 64 FFMAs). Same arithmetic.
#define MXT_OPT_WONLY 512
// MXT_OPT_DELAY1 (v2s, v3s, run 86): consumer warpgroup 1 sleeps ~half an 8-step group
//   (__nanosleep(800)) once before its first tile, so the two warpgroups start out of phase
//   and, if nothing pulls them back together, drain at different moments. Same arithmetic.
#define MXT_OPT_DELAY1 1024
// MXT_OPT_CHAIN (v2c, run 89; diagnostic: exact only when every operand's block scales are
//   uniform across each 128-deep stage): the stage's four k32 wgmmas accumulate in the tensor
//   core into one partial buffer (scale-d 0, then 1) and that sum is promoted once with the
//   scales of the stage's first k32 block: 64 FFMA per stage instead of per k32 step, the
//   DeepGEMM 1x128 structure. Measures what a 1x128 promotion would buy the real kernel
//   (u, docs/perf.md run 89) before anything is built to make operands uniform exactly.
#define MXT_OPT_CHAIN 2048
MX_DEV mx_u32 mxt_desc_lo(mx_u32 saddr) { return ((saddr & 0x3FFFF) >> 4) | (1u << 16); }
MX_DEV mx_u64 mxt_desc_from_lo(mx_u32 lo) { return ((mx_u64)((1024 >> 4) | (1u << 30)) << 32) | lo; }

// MXT_OPT_CHAIN helpers (v2c / v3c / v7c diagnostics): one stage's four k32 wgmmas chained
// into the partial buffer t (scale-d 0, 1, 1, 1; one commit group), and the promotion of that
// sum with the stage's first k32 scales (A rows wrow, wrow + 8; the first weight-scale row),
// after which the stage is released (and, in a cluster, to the peer CTA too).
template <int FA, int FB, class LAY>
MX_DEV void mxt_chain4(float* t, mx_u32 bst, int wg) {
  reg_pin<64>(t);
  wgmma_fence();
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const mx_u32 bb = bst + 32 * q;
    const mx_u64 da = make_smem_desc_sw128(bb + wg * LAY::A_WG), db = make_smem_desc_sw128(bb + LAY::B_OFF);
    if (q == 0) wgmma_m64n128k32_inplace<FA, FB>(t, da, db);
    else wgmma_m64n128k32_acc<FA, FB>(t, da, db);
  }
  wgmma_commit();
}
template <int SB2D, class LAY, int OPT>
MX_DEV void mxt_chain_promote(float* acc, float* t, mx_u32 bst, const mx_u8* sgst, mx_u64* empty_st, int wrow, int lane) {
  // (empty_st == nullptr: the caller releases the stage itself, v8c)
  const float4 sa0 = lds_f32x4(bst + LAY::SA_OFF + 16 * wrow);
  const float4 sa1 = lds_f32x4(bst + LAY::SA_OFF + 16 * (wrow + 8));
  const float4 sb4 = SB2D ? lds_f32x4(bst + LAY::SB_OFF) : make_float4(0.f, 0.f, 0.f, 0.f);
  const float* sBg = reinterpret_cast<const float*>(sgst + LAY::SB_OFF);
  reg_pin<64>(t);
  mxt_promote<SB2D, 0>(acc, t, sa0.x, sa1.x, make_float2(sb4.x, sb4.y), sBg, lane);
  mxt_promote<SB2D, 1>(acc, t + 32, sa0.x, sa1.x, make_float2(sb4.z, sb4.w), sBg, lane);
  if (empty_st != nullptr) {
    __syncwarp();   // (as mbar_arrive_warp)
    if (lane == 0) {
      mbar_arrive(empty_st);
      if (OPT & MXT_OPT_CLUSTER) mbar_arrive_cluster(empty_st, cluster_ctarank() ^ 1u);
    }
  }
}

// Skewed groups (Q0, NQ; MXT_OPT_SKEW): a group is the NQ k32 steps at positions
// Q0 .. Q0+NQ-1 of the two-stage window st0 (positions 0-3), st1 (4-7). The default
// (Q0 = 0, NQ = 4 * NS) is the v2/v3 group above. A stage is released (empty[] arrive)
// after the promotion of its last step, and `stage` advances by the stages completed.
template <int FA, int FB, int SB2D, int NS, int STAGES, class LAY = MxtLay128<SB2D>, int OPT = 0,
          int Q0 = 0, int NQ = 4 * NS>
MX_DEV void mxt_group_v2(float* acc, float* ta, float* tb, mx_u32 sbase, const mx_u8* sgen,
                         mx_u64* full, mx_u64* empty, int& stage, mx_u32& phase, int wg, int wrow, int lane) {
  constexpr int STAGE = LAY::STAGE;
  constexpr int PEND = Q0 + NQ;                  // one past the group's last position
  static_assert(Q0 >= 0 && Q0 < 4 && NQ >= 1 && PEND <= 8, "a group lies in a two-stage window");
  constexpr bool TWO = PEND > 4;                 // the group reaches into st1
  const int st0 = stage;
  const int st1 = (stage + 1 == STAGES) ? 0 : stage + 1;
  if constexpr ((OPT & MXT_OPT_CHAIN) != 0 && Q0 == 0 && PEND == 8) {
    // v3c: stage 1's chain is issued before stage 0's sum is promoted (two partial buffers).
    mbar_wait(&full[st0], phase);
    mxt_chain4<FA, FB, LAY>(ta, sbase + st0 * STAGE, wg);
    mbar_wait(&full[st1], st1 == 0 ? (phase ^ 1) : phase);
    mxt_chain4<FA, FB, LAY>(tb, sbase + st1 * STAGE, wg);
    wgmma_wait<1>();
    mxt_chain_promote<SB2D, LAY, OPT>(acc, ta, sbase + st0 * STAGE, sgen + st0 * STAGE, &empty[st0], wrow, lane);
    wgmma_wait<0>();
    mxt_chain_promote<SB2D, LAY, OPT>(acc, tb, sbase + st1 * STAGE, sgen + st1 * STAGE, &empty[st1], wrow, lane);
    for (int g = 0; g < 2; ++g)
      if (++stage == STAGES) { stage = 0; phase ^= 1; }
    return;
  }
  mbar_wait(&full[st0], phase);
  if (TWO) mbar_wait(&full[st1], st1 == 0 ? (phase ^ 1) : phase);
  const mx_u32 b0 = sbase + st0 * STAGE, b1 = sbase + st1 * STAGE;
  constexpr bool DINC = (OPT & MXT_OPT_DINC) != 0;
  constexpr bool PRE = SB2D && Q0 == 0 && PEND == 4 && (OPT & MXT_OPT_PRESCALE) != 0;
  mx_u32 dA0 = 0, dB0 = 0, dA1 = 0, dB1 = 0;
  if (DINC) {
    dA0 = mxt_desc_lo(b0 + wg * LAY::A_WG); dB0 = mxt_desc_lo(b0 + LAY::B_OFF);
    if (TWO) { dA1 = mxt_desc_lo(b1 + wg * LAY::A_WG); dB1 = mxt_desc_lo(b1 + LAY::B_OFF); }
  }
  float4 sa0 = make_float4(0.f, 0.f, 0.f, 0.f), sa1 = sa0;
  float4 sbp[4] = {sa0, sa0, sa0, sa0};
  if (PRE) {
    sa0 = lds_f32x4(b0 + LAY::SA_OFF + 16 * wrow);
    sa1 = lds_f32x4(b0 + LAY::SA_OFF + 16 * (wrow + 8));
#pragma unroll
    for (int j = 0; j < 4; ++j) sbp[j] = lds_f32x4(b0 + LAY::SB_OFF + 16 * j);
  }
  if constexpr ((OPT & MXT_OPT_CHAIN) != 0 && Q0 == 0 && PEND == 4) {
    mxt_chain4<FA, FB, LAY>(ta, b0, wg);
    wgmma_wait<0>();
    mxt_chain_promote<SB2D, LAY, OPT>(acc, ta, b0, sgen + st0 * STAGE, &empty[st0], wrow, lane);
    if (++stage == STAGES) { stage = 0; phase ^= 1; }
    return;
  }
#pragma unroll
  for (int q = 0; q < NQ + 1; ++q) {
    if (q < NQ) {
      const int pq = Q0 + q;                     // position of step q in the window
      const mx_u32 bb = (pq < 4 ? b0 : b1) + 32 * (pq & 3);
      float* cur = (q & 1) ? tb : ta;
      if (!(OPT & MXT_OPT_WONLY)) reg_pin<64>(cur);
      wgmma_fence();
      const mx_u64 da = DINC ? mxt_desc_from_lo((pq < 4 ? dA0 : dA1) + 2 * (pq & 3)) : make_smem_desc_sw128(bb + wg * LAY::A_WG);
      const mx_u64 db = DINC ? mxt_desc_from_lo((pq < 4 ? dB0 : dB1) + 2 * (pq & 3)) : make_smem_desc_sw128(bb + LAY::B_OFF);
      if (OPT & MXT_OPT_WONLY) wgmma_m64n128k32<FA, FB>(cur, da, db);
      else wgmma_m64n128k32_inplace<FA, FB>(cur, da, db);
      wgmma_commit();
    }
    if (q >= 1) {
      const int ip = q - 1, pp = Q0 + ip, j = pp & 3;
      const mx_u32 bs = pp < 4 ? b0 : b1;
      if ((j == 0 || ip == 0) && !PRE) {
        // This stage's A-row scales, kb 0..3 (stage-major: row*4 + kb, 16 bytes per row).
        sa0 = lds_f32x4(bs + LAY::SA_OFF + 16 * wrow);
        sa1 = lds_f32x4(bs + LAY::SA_OFF + 16 * (wrow + 8));
      }
      const float s0 = j == 0 ? sa0.x : (j == 1 ? sa0.y : (j == 2 ? sa0.z : sa0.w));
      const float s1 = j == 0 ? sa1.x : (j == 1 ? sa1.y : (j == 2 ? sa1.z : sa1.w));
      float4 sb4 = make_float4(0.f, 0.f, 0.f, 0.f);
      if (PRE) sb4 = sbp[j];
      else if (SB2D) sb4 = lds_f32x4(bs + LAY::SB_OFF + 16 * j);
      const float* sBg = reinterpret_cast<const float*>(sgen + (pp < 4 ? st0 : st1) * STAGE + LAY::SB_OFF);
      if (q < NQ) wgmma_wait<1>(); else wgmma_wait<0>();
      float* prv = (ip & 1) ? tb : ta;
      reg_pin<64>(prv);
      if (!(OPT & MXT_OPT_NO_PROMOTE)) {
        mxt_promote<SB2D, 0>(acc, prv, s0, s1, make_float2(sb4.x, sb4.y), sBg + 128 * j, lane);
        mxt_promote<SB2D, 1>(acc, prv + 32, s0, s1, make_float2(sb4.z, sb4.w), sBg + 128 * j, lane);
      } else {
        // keep the scale loads and one output of each wgmma live (with none read, ptxas
        // replaces the wgmma by an empty HGMMA.64x8x16)
        acc[0] += (s0 + s1 + sb4.x + sb4.y + sb4.z + sb4.w) * prv[0];
      }
      if (TWO && pp == 3) {
        __syncwarp();   // (as mbar_arrive_warp)
        if (lane == 0) {
          mbar_arrive(&empty[st0]);
          if (OPT & MXT_OPT_CLUSTER) mbar_arrive_cluster(&empty[st0], cluster_ctarank() ^ 1u);
        }
      }
    }
  }
  if (PEND == 4 || PEND == 8) {
    __syncwarp();   // (as mbar_arrive_warp)
    if (lane == 0) {
      mbar_arrive(&empty[PEND == 8 ? st1 : st0]);
      if (OPT & MXT_OPT_CLUSTER) mbar_arrive_cluster(&empty[PEND == 8 ? st1 : st0], cluster_ctarank() ^ 1u);
    }
  }
#pragma unroll
  for (int g = 0; g < PEND / 4; ++g) {
    if (++stage == STAGES) { stage = 0; phase ^= 1; }
  }
}
