// mx_gemm_common.cuh — what both grouped-GEMM families share: MxGemmParams, the tile
// geometry, the persistent tile decode over experts (grouped rows or batched K segments)
// and the promotion of a k32 partial with its block scales.
// Requires mx_ptx.cuh and mx_wgmma.cuh. NVRTC-clean.
#pragma once

struct MxGemmParams {
  const mx_u8* A; mx_i64 lda;                 // A[row*lda + k]           (K-major FP8)
  const mx_u8* B; mx_i64 ldb; mx_i64 b_es;    // B[e*b_es + n*ldb + k]    (K-major FP8)
  const float* SA; mx_i64 ldsa;               // SA[(kb/4)*ldsa + row*4 + kb%4] (FP32 scales, stage-major)
  const float* SB; mx_i64 ldsb; mx_i64 sb_es; // 2D: SB[e*sb_es + kb*ldsb + n/32], 1D: SB[e*sb_es + kb*ldsb + n]
  void* out; mx_i64 ldo; mx_i64 o_es;         // grouped: out[row*ldo + n]; batched: out[e*o_es + row*ldo + n] (out_t: + n*ldo + row)
  const int* offs; int E;                     // cumulative END offsets (device memory)
  int M;        // grouped: rows of the A/out buffers (rows >= offs[E-1] are zeroed); batched: rows per expert
  int N;        // output columns
  int K;        // grouped: reduction length (elements); batched: unused (K_e = m_e)
  int batched;  // 0 grouped rows, 1 batched K segments (wgrad)
  int out_t;    // batched only: store transposed
};

#define MXG_BN 128
#define MXG_BK 128   // bytes (= elements) of K per pipeline stage: 4 k32 steps
#define MXG_LBO 144  // bytes between core matrices adjacent along K
#define MXG_SBO 1152 // bytes between core matrices adjacent along M/N (8 rows)

template <int NC, int SB2D>
struct MxgLayout {
  static constexpr int BM = 64 * NC;
  // 8-row groups of 8 core matrices (one per 16-byte K chunk) spaced 144 B apart
  // (LBO = 144, SBO = 1152): a row's eight chunks land in distinct banks, so one warp
  // can fill full 128-byte rows without shared-memory bank conflicts.
  static constexpr int A_BYTES = (BM / 8) * MXG_SBO;
  static constexpr int B_BYTES = (MXG_BN / 8) * MXG_SBO;
  static constexpr int SA_BYTES = BM * 16;
  static constexpr int SB_BYTES = SB2D ? 64 : 4 * MXG_BN * 4;
  static constexpr int STAGE = A_BYTES + B_BYTES + SA_BYTES + ((SB_BYTES + 127) / 128) * 128;
};

struct MxgTile { int e, row0, rows, n0, kbeg, klen; };

MX_DEV MxgTile mxg_decode(const MxGemmParams& p, int t, int BM, int ntn, int tiles_m,
                          const int* g_start, const int* g_pre, int BN = MXG_BN) {
  MxgTile T;
  if (!p.batched) {
    int mt = t / ntn, nt = t - mt * ntn;
    int e = upper_idx(g_pre, p.E, mt);
    T.e = e;
    T.row0 = g_start[e] + (mt - g_pre[e]) * BM;
    T.rows = min(BM, g_start[e + 1] - T.row0);
    T.n0 = nt * BN;
    T.kbeg = 0;
    T.klen = p.K;
  } else {
    int per_e = tiles_m * ntn;
    int e = t / per_e;
    int rem = t - e * per_e;
    int mt = rem / ntn, nt = rem - mt * ntn;
    T.e = e;
    T.row0 = mt * BM;
    T.rows = min(BM, p.M - T.row0);
    T.n0 = nt * BN;
    T.kbeg = g_pre[e];
    T.klen = g_start[e + 1] - g_start[e];
  }
  return T;
}

// Promotion of one 64-column half H of a k32 step into acc[32H .. 32H+31]:
// acc += tmp * s_a[row] * s_b[column]; sb2 = the 2D weight scales of column blocks 2H, 2H+1,
// sbrow = the stage's 1D weight-scale row (the TMA kernels; mxg_promote for cp.async).
template <int SB2D, int H>
MX_DEV void mxt_promote(float* acc, const float* tmp, float s0, float s1, const float2 sb2,
                        const float* sbrow, int lane) {
  if (SB2D) {
    const float sbv[2] = {sb2.x, sb2.y};
#pragma unroll
    for (int cb = 0; cb < 2; ++cb) {
      const float p0 = s0 * sbv[cb], p1 = s1 * sbv[cb];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int q = (cb * 4 + jj) * 4;
        acc[32 * H + q + 0] = fmaf(tmp[q + 0], p0, acc[32 * H + q + 0]);
        acc[32 * H + q + 1] = fmaf(tmp[q + 1], p0, acc[32 * H + q + 1]);
        acc[32 * H + q + 2] = fmaf(tmp[q + 2], p1, acc[32 * H + q + 2]);
        acc[32 * H + q + 3] = fmaf(tmp[q + 3], p1, acc[32 * H + q + 3]);
      }
    }
  } else {
    const int cofs = 64 * H + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 sb = *reinterpret_cast<const float2*>(sbrow + 8 * j + cofs);
      const int q = 4 * j;
      acc[32 * H + q + 0] = fmaf(tmp[q + 0], s0 * sb.x, acc[32 * H + q + 0]);
      acc[32 * H + q + 1] = fmaf(tmp[q + 1], s0 * sb.y, acc[32 * H + q + 1]);
      acc[32 * H + q + 2] = fmaf(tmp[q + 2], s1 * sb.x, acc[32 * H + q + 2]);
      acc[32 * H + q + 3] = fmaf(tmp[q + 3], s1 * sb.y, acc[32 * H + q + 3]);
    }
  }
}

// The cp.async kernel's form: the step's 2D weight scales at sbs (+2H), 1D ones as a row at sbs.
template <int SB2D, int H>
MX_DEV void mxg_promote(float* acc, const float* tmp, float s0, float s1, const float* sbs, int lane) {
  const float2 sb2 = SB2D ? *reinterpret_cast<const float2*>(sbs + 2 * H) : make_float2(0.f, 0.f);
  mxt_promote<SB2D, H>(acc, tmp, s0, s1, sb2, sbs, lane);
}

template <int NC, int SB2D>
MX_DEV void mxg_stage_regs(mx_u8* smem, int st, int wrow, float* sa0, float* sa1, const float*& sbp) {
  typedef MxgLayout<NC, SB2D> L;
  mx_u8* base = smem + (size_t)st * L::STAGE;
  const float* sA = reinterpret_cast<const float*>(base + L::A_BYTES + L::B_BYTES);
  const float4 x0 = *reinterpret_cast<const float4*>(sA + 4 * wrow);
  const float4 x1 = *reinterpret_cast<const float4*>(sA + 4 * (wrow + 8));
  sa0[0] = x0.x; sa0[1] = x0.y; sa0[2] = x0.z; sa0[3] = x0.w;
  sa1[0] = x1.x; sa1[1] = x1.y; sa1[2] = x1.z; sa1[3] = x1.w;
  sbp = reinterpret_cast<const float*>(base + L::A_BYTES + L::B_BYTES + L::SA_BYTES);
}
