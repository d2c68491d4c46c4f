// mx_tgemm_chain.cuh — the chained grouped GEMM (v8c, docs/perf.md runs 92–93): 256 x 128
// tiles per CTA, each stage's four k32 wgmmas chained in the tensor core and promoted once
// with the stage's scales. Exact for operands re-encoded to one scale per stage
// (mx_reencode.cuh); the elements the re-encoding could not carry are added back from the
// residual lists to the FP32 accumulators before the epilogue (mxc_fix):
//   out = A' B' (tensor cores)  +  A_res B (row lists of A, B's original bytes)
//                               +  A' B_res (row lists of B, A' bytes and scales).
// Each consumer warpgroup owns 128 rows (two 64-row blocks, 128 accumulators per thread) and
// runs, per stage, block 0's chain into its one 64-register partial, promotes it, then block
// 1's; the other warpgroup's chains keep the tensor core busy meanwhile. Only the chained
// promotion makes the register budget fit (acc 128 + one partial of 64). Forward and dgrad
// (grouped rows), 32x32 B scales, register epilogue.
// Launch: 384 threads, mxt8_smem_bytes() of dynamic shared memory, an A tensor map whose box
// is 128 B x 256 rows (B's stays 128 x 128). Requires the mx_tgemm_* headers. NVRTC-clean.
#pragma once

template <int SB2D> struct MxtLay256 {
  static_assert(SB2D == 1, "the chained GEMM takes 32x32 B scales only");
  static constexpr int BM = 256, BN = 128, STAGE = 54272;
  static constexpr int A_WG = 8192, B_OFF = 32768, SA_OFF = 49152, SB_OFF = 53248;
};
#define MXT8_STAGES 4
constexpr int mxt8_smem_bytes() { return MXT8_STAGES * MxtLay256<1>::STAGE + 1024; }

// The residual lists and the operands' other encodings the corrections read.
struct MxChainFix {
  const MxRes* resA; const int* cntA;   // A_res: GEMM row R's list at resA[R * slots]
  const MxRes* resB; const int* cntB;   // B_res: expert e, output column n: row e * N + n
  const mx_u8* Bo; const mx_u8* sBo;    // B's original bytes (p.B's layout) and E8M0 scales
  mx_i64 ise, isr, isc;                 //   sBo[e * ise + (n / 32) * isc + kb * isr]
  int slots;
  int terms;                            // 3: both corrections (0-2: harness diagnostics, wrong results)
};
struct MxGemmChainParams { MxGemmTmaParams b; MxChainFix f; };

// The corrections of a thread's 4 rows (tile rows wrow + {0, 8, 64, 72}) and 32 columns (the
// wgmma D fragment: 8 j + 2 (lane & 3) + {0, 1}); acc[64 (q >> 1) + 4 j + 2 (q & 1) + c] for
// row q, column (j, c). Latency, not arithmetic, is the cost (a few entries per thread,
// each a handful of scattered loads), so every list length is loaded at once and the lists
// are walked level by level: entry i of all 4 rows, then of all 32 columns, independent
// loads the compiler can issue together. Per output the entries are added in list order
// (k ascending), one FMA each: deterministic.
template <int FA, int FB>
MX_DEV void mxc_fix(const MxGemmParams& p, const MxChainFix& f, const MxgTile& T, float* acc, int wrow, int lane) {
  const int cofs = 2 * (lane & 3);
  int Rq[4], na[4], ma = 0;   // (rows and columns fit in int: M, N are)
  bool rv[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int r = wrow + 8 * (q & 1) + 64 * (q >> 1);
    rv[q] = r < T.rows;
    Rq[q] = T.row0 + (rv[q] ? r : 0);
    na[q] = rv[q] ? f.cntA[Rq[q]] : 0;
  }
  mx_u32 nb[8];   // the 32 column list lengths, one byte each (lengths <= slots <= 255)
  int mb = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) nb[i] = 0;
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int n = T.n0 + 8 * j + cofs + c;
      const int v = n < p.N ? f.cntB[(mx_i64)T.e * p.N + n] : 0;
      nb[j >> 1] |= (mx_u32)v << (8 * (2 * (j & 1) + c));
      mb = max(mb, v);
    }
#pragma unroll
  for (int q = 0; q < 4; ++q) ma = max(ma, na[q]);
  // A_res B: entry (k, v) of row q adds v * B[e][n][k] to the row's 32 outputs
  const mx_u8* be = f.Bo + (mx_i64)T.e * p.b_es;
  const mx_u8* se = f.sBo + (mx_i64)T.e * f.ise;
  if (!(f.terms & 1)) ma = 0;
  if (!(f.terms & 2)) mb = 0;
  for (int i = 0; i < ma; ++i) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (i < na[q]) {
        const MxRes x = f.resA[(mx_i64)Rq[q] * f.slots + i];
        const mx_u8* bk = be + x.k;
        const mx_u8* sk = se + (mx_i64)(x.k >> 5) * f.isr;
        float* aq = acc + 64 * (q >> 1) + 2 * (q & 1);
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const int n = T.n0 + 8 * j + cofs;
          if (n < p.N) {   // N is even: n + 1 < N too
            const float sb = mx_e8m0_to_f32(sk[(mx_i64)(n >> 5) * f.isc]);
            aq[4 * j] = fmaf(x.v, mx_fp8_value<FB>(bk[(mx_i64)n * p.ldb]) * sb, aq[4 * j]);
            aq[4 * j + 1] = fmaf(x.v, mx_fp8_value<FB>(bk[(mx_i64)(n + 1) * p.ldb]) * sb, aq[4 * j + 1]);
          }
        }
      }
    }
  }
  // A' B_res: entry (k, v) of column n adds A'[R][k] * v to the column's 4 outputs
  for (int i = 0; i < mb; ++i) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        if (i < (int)((nb[j >> 1] >> (8 * (2 * (j & 1) + c))) & 0xFFu)) {
          const int n = T.n0 + 8 * j + cofs + c;
          const MxRes x = f.resB[((mx_i64)T.e * p.N + n) * f.slots + i];
          const float* sa = p.SA + (mx_i64)(x.k >> 7) * p.ldsa + ((x.k >> 5) & 3);
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            if (rv[q]) {
              const float a = mx_fp8_value<FA>(p.A[(mx_i64)Rq[q] * p.lda + x.k]) * sa[(mx_i64)Rq[q] * 4];
              float& o = acc[64 * (q >> 1) + 4 * j + 2 * (q & 1) + c];
              o = fmaf(a, x.v, o);
            }
          }
        }
      }
  }
}

// fix == nullptr: no corrections (the harness's v8c diagnostic on stage-uniform operands).
template <int FA, int FB, int SB2D, int OUT_BF16>
MX_DEV void mx_tgemm_chain_impl(const MxGemmTmaParams& P, const MxChainFix* fix) {
  typedef MxtLay256<SB2D> LAY;
  constexpr int STAGES = MXT8_STAGES;
  const MxGemmParams& p = P.g;
  extern __shared__ __align__(1024) mx_u8 mxt_smem[];
  __shared__ __align__(8) mx_u64 full[STAGES], empty[STAGES];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];
  const int tid = threadIdx.x;
  mxt_setup(P, full, empty, STAGES, 8, LAY::BM, g_start, g_pre);
  if (tid >= 256) {
    setmaxnreg_dec<40>();
    if (tid == 256)
      mxt_produce<SB2D, STAGES, 0, LAY>(P, g_start, g_pre, mxt_smem_base(mxt_smem), blockIdx.x, gridDim.x, full, empty);
    return;
  }
  setmaxnreg_inc<232>();
  const mx_u32 sbase = mxt_smem_base(mxt_smem);
  const mx_u8* sgen = mxt_smem + (sbase - smem_u32(mxt_smem));
  const MxtCtx c = mxt_ctx(p, g_start, g_pre, LAY::BM, LAY::BN);
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  const int lt = tid & 127;
  const int warp = lt >> 5, lane = lt & 31;
  const int wrow = 128 * wg + 16 * warp + (lane >> 2);   // block 0's rows; block 1: wrow + 64
  int stage = 0; mx_u32 phase = 0;
  float acc[128], t0[64];
  for (int t = blockIdx.x; t < c.total; t += gridDim.x) {
    int nst;
    {
      const MxgTile T = mxg_decode(p, t, LAY::BM, c.ntn, c.tiles_m, g_start, g_pre, LAY::BN);
      nst = mxt_tile_stages(p, T, g_pre);
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    for (; nst > 0; --nst) {
      const mx_u32 bst = sbase + stage * LAY::STAGE;
      const mx_u8* sg = sgen + stage * LAY::STAGE;
      mbar_wait(&full[stage], phase);
      mxt_chain4<FA, FB, LAY>(t0, bst, 2 * wg);
      wgmma_wait<0>();
      mxt_chain_promote<SB2D, LAY, 0>(acc, t0, bst, sg, nullptr, wrow, lane);
      mxt_chain4<FA, FB, LAY>(t0, bst, 2 * wg + 1);
      wgmma_wait<0>();
      mxt_chain_promote<SB2D, LAY, 0>(acc + 64, t0, bst, sg, nullptr, wrow + 64, lane);
      if (lane == 0) mbar_arrive(&empty[stage]);
      if (++stage == STAGES) { stage = 0; phase ^= 1; }
    }
    int te = t;
    asm volatile("" : "+r"(te));
    const MxgTile T = mxg_decode(p, te, LAY::BM, c.ntn, c.tiles_m, g_start, g_pre, LAY::BN);
    if (fix != nullptr) mxc_fix<FA, FB>(p, *fix, T, acc, wrow, lane);
    mxt_epilogue<OUT_BF16>(p, T, acc, wrow, lane);
    mxt_epilogue<OUT_BF16>(p, T, acc + 64, wrow + 64, lane);
  }
  mxt_zero_padding_rows<OUT_BF16>(p, g_start, tid);
}
