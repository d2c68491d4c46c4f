// mx_grouped_gemm.cu — MXFP8 grouped GEMM for sm_90a (Hopper), exact MX semantics:
//   out[r, n] = sum_kb  SA[r, kb] * SB[kb, n] * sum_{k in block kb} A[r, k] * B[n, k]
// Each k32 block is one FP8 wgmma (m64n128k32) whose FP32 result is promoted into FP32
// registers with its block scales ("promotion"), so every MX block keeps its own scale.
//
// One kernel serves the three passes of a grouped linear layer (see README.md):
//   grouped rows (forward, dgrad): expert e owns rows offs[e-1]..offs[e] of A/out;
//   batched K segments (wgrad): expert e contracts over K = m_e elements starting at the
//   expert's 128-aligned segment in the transposed, zero-padded operands.
// Structure: persistent CTAs; warpgroup NC = producer (cp.async, zero-fill masking, one
// mbarrier per stage), warpgroups 0..NC-1 = consumers (m64 x n128 each). K is consumed in
// straight-line groups of 8 (or 4) k32 steps that drain at their end (no wgmma in flight
// across a loop back-edge, so ptxas keeps them asynchronous); each step is two m64n64k32
// wgmmas into two alternating 32-register buffers, so the promotion of one overlaps the
// next wgmma.
#include "mx_ptx.cuh"
#include "mx_wgmma.cuh"

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
      if (lane == 0) mbar_arrive(&empty[st0]);
      mxg_stage_regs<NC, SB2D>(smem, st1, wrow, sa0, sa1, sbp);
    }
  }
  wgmma_wait<0>();
  reg_pin<32>(tb);
  mxg_promote<SB2D, 1>(acc, tb, sa0[3], sa1[3], sbp + (SB2D ? 4 * 3 : MXG_BN * 3), lane);
  if (lane == 0) mbar_arrive(&empty[NS == 2 ? st1 : st0]);
#pragma unroll
  for (int g = 0; g < NS; ++g) {
    if (++stage == STAGES) { stage = 0; phase ^= 1; }
  }
}

template <int NC, int FA, int FB, int SB2D, int OUT_BF16, int STAGES>
MX_DEV void mx_grouped_gemm_impl(const MxGemmParams& p) {
  typedef MxgLayout<NC, SB2D> L;
  constexpr int BM = L::BM;
  extern __shared__ __align__(1024) mx_u8 smem[];
  __shared__ __align__(8) mx_u64 full[STAGES], empty[STAGES];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) { mbar_init(&full[s], 128); mbar_init(&empty[s], 4 * NC); }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
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
};
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
template <int SB2D, int STAGES, int PAD2 = 0, class LAY = MxtLay128<SB2D>, int MC = 0>
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
    if (PAD2 && s.ks >= s.nreal) {
      // zero stage: scales 0 (generic stores, ordered before the consumers' reads by the
      // mbarrier arrive's release; the proxy fence orders them before later bulk copies
      // into the same bytes), data zero-filled by out-of-bounds TMA boxes.
#pragma unroll 1
      for (mx_u32 o = LAY::SA_OFF; o < (mx_u32)STAGE; o += 16)
        asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" :: "r"(dst + o), "r"(0) : "memory");
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
    const mx_u32 sb_bytes = SB2D ? 4 * SBW : 2048;
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
      else      bulk_load(dst + LAY::SB_OFF + 512 * r, SBexp + (mx_i64)(kb0 + r) * p.ldsb + s.n0, 512, &full[s.stage]);
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
      if (NS == 2 && qp == 4 * HS - 1 && lane == 0) mbar_arrive(&empty[st0]);
    }
  }
  if (lane == 0) mbar_arrive(&empty[NS == 2 ? st1 : st0]);
#pragma unroll
  for (int g = 0; g < NS; ++g) {
    if (++stage == STAGES) { stage = 0; phase ^= 1; }
  }
}

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
MX_DEV mx_u32 mxt_desc_lo(mx_u32 saddr) { return ((saddr & 0x3FFFF) >> 4) | (1u << 16); }
MX_DEV mx_u64 mxt_desc_from_lo(mx_u32 lo) { return ((mx_u64)((1024 >> 4) | (1u << 30)) << 32) | lo; }

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
#pragma unroll
  for (int q = 0; q < NQ + 1; ++q) {
    if (q < NQ) {
      const int pq = Q0 + q;                     // position of step q in the window
      const mx_u32 bb = (pq < 4 ? b0 : b1) + 32 * (pq & 3);
      float* cur = (q & 1) ? tb : ta;
      reg_pin<64>(cur);
      wgmma_fence();
      if (DINC)
        wgmma_m64n128k32_inplace<FA, FB>(cur, mxt_desc_from_lo((pq < 4 ? dA0 : dA1) + 2 * (pq & 3)),
                                         mxt_desc_from_lo((pq < 4 ? dB0 : dB1) + 2 * (pq & 3)));
      else
        wgmma_m64n128k32_inplace<FA, FB>(cur, make_smem_desc_sw128(bb + wg * LAY::A_WG), make_smem_desc_sw128(bb + LAY::B_OFF));
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
      if (TWO && pp == 3 && lane == 0) {
        mbar_arrive(&empty[st0]);
        if (OPT & MXT_OPT_CLUSTER) mbar_arrive_cluster(&empty[st0], cluster_ctarank() ^ 1u);
      }
    }
  }
  if ((PEND == 4 || PEND == 8) && lane == 0) {
    mbar_arrive(&empty[PEND == 8 ? st1 : st0]);
    if (OPT & MXT_OPT_CLUSTER) mbar_arrive_cluster(&empty[PEND == 8 ? st1 : st0], cluster_ctarank() ^ 1u);
  }
#pragma unroll
  for (int g = 0; g < PEND / 4; ++g) {
    if (++stage == STAGES) { stage = 0; phase ^= 1; }
  }
}

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
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
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
template <int SB2D, int STAGES, int PAD2, class LAY, int MC = 0>
MX_DEV void mxt_produce(const MxGemmTmaParams& P, const int* g_start, const int* g_pre, mx_u32 sbase,
                        int first, int step, mx_u64* full, mx_u64* empty, int crank = 0) {
  const MxtCtx c = mxt_ctx(P.g, g_start, g_pre, MC ? 2 * LAY::BM : LAY::BM, LAY::BN);
  MxtProd prod;
  prod.step = step;
  prod.crank = crank;
  prod.t = first - step; prod.ks = 0; prod.nst = 0;
  prod.row0 = prod.brow = prod.n0 = prod.e = prod.kbeg = 0;
  prod.stage = 0; prod.phase = 0; prod.pc = 0; prod.nreal = 0;
  mxt_fill<SB2D, STAGES, PAD2, LAY, MC>(prod, 0x7ffffffe, P, c, sbase, full, empty);
}

// The consumers' tile loop: for each tile of the sequence, zero acc, run_groups(nst) (the
// main loop over the tile's nst stages), then the epilogue. The tile is decoded again after
// the main loop so that nothing of it is live across it (register fit, see mx_tgemm_impl).
// NACC accumulators per thread (BN / 2); run_groups(nst, sbsh) gets the tile's stage count and
// (n0 / 32) & 3, where its first weight-scale column block sits in a v5 scale window.
// With TMA (v2t), full 128-row tiles of a bf16 output leave through mxt_epilogue_tma.
// half >= 0 (v6): the CTA computes 64-row half `half` of each bm-row tile (its rows and row
// count cut to that half; a half past the tile's rows stores nothing).
MX_DEV MxgTile mxt_half(MxgTile T, int half) {
  if (half >= 0) {
    T.row0 += 64 * half;
    T.rows = min(max(T.rows - 64 * half, 0), 64);
  }
  return T;
}
template <int OUT_BF16, int NACC = 64, int BN = MXG_BN, bool STORE = true, bool TMA = false, class RunGroups>
MX_DEV void mxt_consume(const MxGemmParams& p, const MxtCtx& c, const int* g_start, const int* g_pre, int bm,
                        int first, int step, float* acc, int wrow, int lane, RunGroups run_groups,
                        const MxtStore* tst = nullptr, int half = -1) {
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
    const MxgTile T = mxt_half(mxg_decode(p, te, bm, c.ntn, c.tiles_m, g_start, g_pre, BN), half);
    if constexpr (TMA && OUT_BF16 && NACC == 64) {
      if (tst->tm != nullptr && T.rows == (half >= 0 ? 64 : 128)) { mxt_epilogue_tma(p, T, acc, *tst, lane); continue; }
    }
    if (STORE || p.N < 0) mxt_epilogue<OUT_BF16, NACC>(p, T, acc, wrow, lane);  // !STORE: diagnostic, no stores
  }
  if constexpr (TMA) {
    if (tst->lt == 0) bulk_wait<0>();
  }
}

// MODE 0/1/3 kernels (the default mx_tgemm_*). Register fit: like v2, everything a role
// needs is computed inside its branch after setmaxnreg and the padding rows are zeroed by
// the consumers only; before (tile context and tid computed ahead of the role split, live
// across the consumer main loop) the f32-output kernels spilled 16 B and reloaded them
// every group. The main loop and promotion order are unchanged.
template <int FA, int FB, int SB2D, int OUT_BF16, int STAGES, int MODE>
MX_DEV void mx_tgemm_impl(const MxGemmTmaParams& P) {
  const MxGemmParams& p = P.g;
  extern __shared__ __align__(1024) mx_u8 mxt_smem[];
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
  extern __shared__ __align__(1024) mx_u8 mxt_smem[];
  __shared__ __align__(8) mx_u64 full[STAGES], empty[STAGES];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];

  const int tid = threadIdx.x;
  mxt_setup(P, full, empty, STAGES, 8, MXT_BM, g_start, g_pre);

  if (tid >= 256) {
    // ---- producer warpgroup: one thread issues every TMA / bulk copy ----
    setmaxnreg_dec<MXT_V2_PREG>();
    if (tid == 256)
      mxt_produce<SB2D, STAGES, NSG == 2, MxtLay128<SB2D>>(P, g_start, g_pre, mxt_smem_base(mxt_smem), blockIdx.x, gridDim.x, full, empty);
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

// mx_tgemm_<...>_v2*: the v2 main loop (see mxt_group_v2 / mx_tgemm_v2_impl) with the OPT
// bits MXT_OPT_*. Same launch and parameters as the corresponding mx_tgemm_* kernel.
#define MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, OPT) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_v2_impl<FA, FB, SB2D, OBF, ST, 1, OPT>(p); }
// v2: plain; v2u: warp-uniform warpgroup index (the backend's f32-output 32x32 kernel);
// v2d: stepped descriptors; v2p: the stage's scales preloaded; v2o: warpgroup 1's groups
// skewed by two k32 steps; v2n / v2e: DIAGNOSTICS with wrong results (no promotion / no
// output stores), for bench/power.py.
#define MXT_INST_V2(NAME, FA, FB, SB2D, OBF, ST)  MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, 0)
#define MXT_INST_V2U(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG)
#define MXT_INST_V2D(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_DINC)
#define MXT_INST_V2P(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_PRESCALE)
#define MXT_INST_V2O(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_SKEW)
#define MXT_INST_V2N(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_NO_PROMOTE)
#define MXT_INST_V2E(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_NO_STORE)

// mx_tgemm_<...>_v2t: v2u with the TMA-store epilogue (MXT_OPT_TMA_STORE); parameters
// MxGemmTmaParamsO, 384 threads, mxt_v2t_smem_bytes<SB2D>() of dynamic shared memory.
#define MXT_V2T_STAGES 5
template <int SB2D> constexpr int mxt_v2t_smem_bytes() { return MXT_V2T_STAGES * MxtLayout<SB2D>::STAGE + 2 * 16384 + 1024; }
// The backend's side of this contract (plugin-mxfp8/src/backend/cuda/device.rs: tgemm_smem,
// TGemmParamsO) hard-codes these numbers; NVRTC compiles this file in CI, so a change here
// that forgets the Rust side fails there instead of on a GPU.
static_assert(mxt_v2t_smem_bytes<1>() == 212992, "tgemm_smem(w2d, tma_store) in src/backend/cuda/device.rs");
// (tmO then sits at 448 and o_tma at 576, as src/backend/cuda/params.rs asserts; NVRTC has no offsetof.)
static_assert(sizeof(MxGemmTmaParams) == 448 && alignof(MxTmap) == 64 && sizeof(MxGemmTmaParamsO) == 640,
              "TGemmParams / TGemmParamsO in src/backend/cuda/params.rs");
#define MXT_INST_V2T(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { \
    mx_tgemm_v2_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, 1, MXT_OPT_UWG | MXT_OPT_TMA_STORE>(p.b, p.o_tma ? &p.tmO : nullptr); }

// mx_tgemm_<...>_v3: the v2 main loop with two stages (8 k32 steps) per straight-line group;
// bitwise-identical results to v2. Same launch and parameters as the mx_tgemm_* kernel.
#define MXT_INST_V3(NAME, FA, FB, SB2D, OBF, ST) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_v2_impl<FA, FB, SB2D, OBF, ST, 2>(p); }

#define MXT_INST_M(NAME, FA, FB, SB2D, OBF, ST, MODE) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_impl<FA, FB, SB2D, OBF, ST, MODE>(p); }
#ifndef MXT_MODE
#define MXT_MODE 0
#endif
#define MXT_INST(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_M(NAME, FA, FB, SB2D, OBF, ST, MXT_MODE)

// Instantiations: mx_gemm_<A fmt><B fmt>_<w2d|w1d>_<bf16|f32>[_bm64]
#define MXG_INST(NAME, NC, FA, FB, SB2D, OBF, ST) \
  extern "C" __global__ void __launch_bounds__(128 * (NC + 1), (NC == 1 ? 2 : 1)) \
  NAME(const __grid_constant__ MxGemmParams p) { mx_grouped_gemm_impl<NC, FA, FB, SB2D, OBF, ST>(p); }

#ifndef MXG_CUSTOM_INSTANTIATIONS
MXG_INST(mx_gemm_e4m3e4m3_w2d_bf16, 2, 0, 0, 1, 1, 5)
MXG_INST(mx_gemm_e4m3e4m3_w2d_f32,  2, 0, 0, 1, 0, 5)
MXG_INST(mx_gemm_e4m3e4m3_w1d_bf16, 2, 0, 0, 0, 1, 5)
MXG_INST(mx_gemm_e4m3e4m3_w1d_f32,  2, 0, 0, 0, 0, 5)
MXG_INST(mx_gemm_e5m2e4m3_w2d_bf16, 2, 1, 0, 1, 1, 5)
MXG_INST(mx_gemm_e5m2e4m3_w1d_bf16, 2, 1, 0, 0, 1, 5)
MXG_INST(mx_gemm_e5m2e5m2_w2d_f32,  2, 1, 1, 1, 0, 5)
MXG_INST(mx_gemm_e4m3e4m3_w2d_bf16_bm64, 1, 0, 0, 1, 1, 3)
#endif

#ifndef MXG_CUSTOM_INSTANTIATIONS
MXT_INST(mx_tgemm_e4m3e4m3_w2d_bf16, 0, 0, 1, 1, 6)
MXT_INST(mx_tgemm_e4m3e4m3_w2d_f32,  0, 0, 1, 0, 6)
MXT_INST(mx_tgemm_e4m3e4m3_w1d_bf16, 0, 0, 0, 1, 6)
MXT_INST(mx_tgemm_e4m3e4m3_w1d_f32,  0, 0, 0, 0, 6)
MXT_INST(mx_tgemm_e5m2e4m3_w2d_bf16, 1, 0, 1, 1, 6)
MXT_INST(mx_tgemm_e5m2e4m3_w1d_bf16, 1, 0, 0, 1, 6)
MXT_INST(mx_tgemm_e5m2e5m2_w2d_f32,  1, 1, 1, 0, 6)
#endif

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
MXT_INST_V2T(mx_tgemm_e4m3e4m3_w2d_bf16_v2t, 0, 0, 1, 1)
MXT_INST_V2T(mx_tgemm_e4m3e4m3_w2d_f32_v2t,  0, 0, 1, 0)
MXT_INST_V2T(mx_tgemm_e4m3e4m3_w1d_bf16_v2t, 0, 0, 0, 1)
MXT_INST_V2T(mx_tgemm_e4m3e4m3_w1d_f32_v2t,  0, 0, 0, 0)
#endif

// v3 kernels, opt-in: define MXT_INSTANTIATE_V3 (bench/launch.cu does).
#ifdef MXT_INSTANTIATE_V3
MXT_INST_V3(mx_tgemm_e4m3e4m3_w2d_bf16_v3, 0, 0, 1, 1, 6)
MXT_INST_V3(mx_tgemm_e4m3e4m3_w2d_f32_v3,  0, 0, 1, 0, 6)
MXT_INST_V3(mx_tgemm_e4m3e4m3_w1d_bf16_v3, 0, 0, 0, 1, 6)
MXT_INST_V3(mx_tgemm_e4m3e4m3_w1d_f32_v3,  0, 0, 0, 0, 6)
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
// v4 kernels, opt-in: define MXT_INSTANTIATE_V4 (bench/launch.cu does).
#ifdef MXT_INSTANTIATE_V4
MXT_INST_V4(mx_tgemm_e4m3e4m3_w2d_bf16_v4, 0, 0, 1, 1)
MXT_INST_V4(mx_tgemm_e4m3e4m3_w2d_f32_v4,  0, 0, 1, 0)
#endif
