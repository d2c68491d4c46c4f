// mx_tgemm_chain.cuh — the chained grouped GEMM (v8c, docs/perf.md runs 92–93): 256 x 128
// tiles per CTA, each stage's four k32 wgmmas chained in the tensor core and promoted once
// with the stage's scales. Exact for operands re-encoded to one scale per stage
// (mx_reencode.cuh); the elements the re-encoding could not carry are added back from the
// residual lists to the FP32 accumulators before the epilogue (mxc_gather, mxc_apply below):
//   out = A' B' (tensor cores)  +  A_res B (row lists of A, B's original bytes)
//                               +  A' B_res (row lists of B, A' bytes and scales).
// Each consumer warpgroup owns 128 rows (two 64-row blocks, 128 accumulators per thread) and
// runs, per stage, block 0's chain into its one 64-register partial, promotes it, then block
// 1's; the other warpgroup's chains keep the tensor core busy meanwhile. Only the chained
// promotion makes the register budget fit (acc 128 + one partial of 64). Forward and dgrad
// (grouped rows), 32x32 B scales, register epilogue (opt-in: a TMA-store one for full tiles).
// Launch: 384 threads, mxc_smem_bytes<STAGES, corrections?>() of dynamic shared memory
// (mxt8_smem_bytes(): the harness's v8c), an A tensor map whose box is 128 B x 256 rows (B's
// stays 128 x 128). Requires the mx_tgemm_* headers. NVRTC-clean.
#pragma once

// SB2D 1: B in 32x32 tiles (forward, dgrad); 0: a B scale per column and stage (wgrad, both
// operands re-encoded per row along M): the SB region then holds the stage's 128 column scales
// (512 B, one row: the stage is uniform; mxt_fill loads only that row for this layout).
template <int SB2D> struct MxtLay256 {
  static constexpr int BM = 256, BN = 128, STAGE = 54272;
  static constexpr int A_WG = 8192, B_OFF = 32768, SA_OFF = 49152, SB_OFF = 53248;
};
#define MXT8_STAGES 4

// The residual lists and the transposed operands the corrections read (transposed so that a
// tile's 128 columns of B, or its 256 rows of A', at one k are contiguous bytes: run 97 found
// the K-major reads at 12–32 sectors per useful byte).
struct MxChainFix {
  const MxRes* resA; const int* cntA;   // A_res: GEMM row R's list at resA[R * slots]
  const MxRes* resB; const int* cntB;   // B_res: expert e, output column n: row e * N + n
  const mx_u8* Bt; const mx_u8* sBo;    // B's original bytes transposed: Bt[e * bt_es + k * N + n];
                                        //   its E8M0 scales sBo[e * ise + (n / 32) * isc + kb * isr]
  const mx_u8* At; const mx_u8* sAt;    // A' transposed: At[k * ldt + R]; its E8M0 scales transposed
                                        //   sAt[(k / 32) * ldt + R] (uniform over a stage)
  mx_i64 bt_es, ise, isr, isc, ldt;
  int slots;
  int terms;                            // 3: both corrections (0-2: harness diagnostics, wrong results),
                                        //   | MXC_BT_REF | MXC_BT_FORM
  mx_i64 mc_ss, mc_es;                  // MXC_BT_FORM: the partner's residual counts per row k and
                                        //   stage j of 128 columns at mc[j * mc_ss + e * mc_es + k]
};
// terms | MXC_BT_REF: Bt is the address of an 8-byte word that holds the transposed bytes'
// address (a B annex of ABI 1.4 that refers to its partner tensor's bytes instead of a copy).
#define MXC_BT_REF 4
// terms | MXC_BT_FORM (with MXC_BT_REF): Bt addresses four words, the partner's bytes, then its own
// chain form's bytes (the same layout), their scale bytes ([E][K / 32][ceil(N / 32)] tiles, one
// value per stage of 128 columns) and its residual counts (mc_ss, mc_es), or three nulls (the
// annexes were filled one at a time: the bytes are all there). A row-stage of the
// partner without residuals and with a finite stage scale is its form exactly (same values), so
// the corrections read the form there: its own bytes may have been left out (plugin ABI 1.7's
// bytes on demand for a weight, mx_reencode_pair.cuh's NOQ), and are stored everywhere else.
#define MXC_BT_FORM 8
// tmO, o_tma (MXHOST_MX_CHAIN_TMA_STORE=1): the bf16 output's tensor map (box 64 x 64,
// 128-byte swizzle, as the per-k32 v2t kernels') and whether to store full tiles through it.
struct MxGemmChainParams { MxGemmTmaParams b; MxChainFix f; MxTmap tmO; int o_tma; };

// ---- the corrections, gathered into shared memory (runs 100-104) ----
// Producer warps 1-3 walk the CTA's tiles with the consumers and, for each, bring what its
// corrections read into rounds of U units of 272 bytes (two buffers, mbarriers): an A_res
// entry (row r, k, v) takes one unit, B's 128 bytes at k (Bt) and their four scale bytes; a
// B_res entry (column c, k, v) takes two, the 256 bytes of A' at k and their scales
// (At, sAt, each a 272-byte aligned window that holds the tile's rows at offset row0 % 16).
// One thread per entry loads its record and issues the window's bulk copies (TMA, counted on
// the round's full barrier), so a round costs two memory round trips and no registers. A
// tile has one round or more (the last flagged); the A entries come first, by row and list
// order, then the B entries, by column and list order, so each output adds its terms in one
// fixed order. The consumers add a round's terms to their FP32 accumulators after the main
// loop (POLL: after any stage at which it is ready, waiting for the rest after the loop).
// The products are exact in FP32 (MX values of at most 4 significant bits times a residual).
// Requires N % 16 == 0 and At / sAt rows of ldt bytes, ldt % 16 == 0, with 272 bytes of
// slack after each array (the launcher checks N; the host allocates the transposes).
#define MXC_UNIT 272
template <int U> struct MxcRound {
  int nA, nB, last, o;          // o: the tile's row0 % 16 (B entries' window offset)
  mx_u8 idx[U];                 // entry i: A: tile row; B (i >= nA): tile column
  float v[U];                   // the residual value
  mx_u32 s4[U];                 // A entry: the E8M0 scales of its 4 column blocks
  mx_u8 oa[257], ob[129];       // this round's entries of tile row r: oa[r] .. oa[r + 1] - 1;
                                //   of column c: nA + ob[c] .. nA + ob[c + 1] - 1
  __align__(16) mx_u8 raw[U * MXC_UNIT];   // A entry i: unit i; B entry j: units nA + 2 j (A'), + 1 (scales)
};
template <int U_> struct MxcFixSmem {
  static constexpr int U = U_;
  MxcRound<U> buf[2];
  mx_u64 full[2], empty[2];     // full: 96 gathering threads; empty: 8 consumer warps
  int offA[257], offB[129];     // the gatherers' per-tile list offsets (rows, then columns)
};
// TCB (mxc_apply_b_tc): each consumer warpgroup's two bf16 slabs for the A' B_res corrections
// on the tensor cores, P (its 128 rows x 16 entries) at 0 and Q^T (128 columns x 16 entries)
// at 4096.
template <int U_> struct MxcFixSmemTc : MxcFixSmem<U_> {
  __align__(128) mx_u8 tcb[2][8192];
};
template <int U, bool TCB> struct MxcFixPick { typedef MxcFixSmem<U> T; };
template <int U> struct MxcFixPick<U, true> { typedef MxcFixSmemTc<U> T; };
// Units per round: what the shared memory leaves beside the stages (4 stages: 15; 3: 112, or
// 82 beside the TCB slabs).
template <int STAGES, bool TCB = false> struct MxcUnits { static constexpr int U = STAGES >= 4 ? 15 : (TCB ? 82 : 112); };
template <int STAGES, bool TCB = false> using MxcFix = typename MxcFixPick<MxcUnits<STAGES, TCB>::U, TCB>::T;
template <int STAGES, bool FIX, bool TCB = false> constexpr int mxc_smem_bytes() {
  return STAGES * MxtLay256<1>::STAGE + 1024 + (FIX ? (int)sizeof(MxcFix<STAGES, TCB>) : 0);
}
constexpr int mxt8_smem_bytes() { return mxc_smem_bytes<MXT8_STAGES, false>(); }
// The chained kernel's expert tables are smaller than the other kernels' (MX_MAX_E) to leave
// shared memory to the rounds: the launcher sends E > MXC_MAX_E to the per-k32 kernel.
#define MXC_MAX_E 256

// Exclusive offsets of PER counts per lane (lane-major), the total at off[32 * PER].
template <int PER> MX_DEV void mxc_offsets(const int* c, int* off, int lane) {
  int s = 0;
#pragma unroll
  for (int i = 0; i < PER; ++i) s += c[i];
  int x = warp_incl_scan(s) - s;
#pragma unroll
  for (int i = 0; i < PER; ++i) { off[PER * lane + i] = x; x += c[i]; }
  if (lane == 31) off[32 * PER] = x;
}
// The last i in [0, n) with off[i] <= g (off non-decreasing, off[0] = 0 <= g).
MX_DEV int mxc_find(const int* off, int n, int g) {
  int lo = 0;
  for (int step = n >> 1; step > 0; step >>= 1)
    if (lo + step < n && off[lo + step] <= g) lo += step;
  while (lo + 1 < n && off[lo + 1] <= g) ++lo;   // (n not a power of two)
  return lo;
}

// The first of a row's n list entries whose k (m for wgrad) is >= key (a row's list is in k
// order). Batched GEMMs (wgrad) take each tile's entries within its expert's segment of Mpad.
MX_DEV int mxc_lower(const MxRes* row, int n, int key) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (row[mid].k < key) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// The gatherers (gt = 0..95: warps 1-3 of the producer warpgroup). They move bytes only: the
// consumers convert them (mxc_apply).
// BAT (wgrad: p.batched, B with a scale per column): a row's list spans every expert, so a
// tile counts and takes only the entries with m in its expert's segment [g_pre[e], g_pre[e+1]),
// B lists are indexed by column alone (no expert), and an A entry's unit holds B's 128 bytes at
// m and their 128 column scales (sBo[(m / 32) * isr + n], isc = 1) instead of s4's four.
template <bool BAT, class FS>
MX_DEV void mxc_gather(const MxGemmParams& p, const MxChainFix& f, FS& F, const int* g_start,
                       const int* g_pre, int gt) {
  constexpr int U = FS::U;
  const int gw = gt >> 5, lane = gt & 31;
  const MxtCtx c = mxt_ctx(p, g_start, g_pre, 256, 128);
  const mx_u8* const Bt = (f.terms & MXC_BT_REF) ? *reinterpret_cast<const mx_u8* const*>(f.Bt) : f.Bt;
  int rc = 0;   // rounds issued
  for (int t = blockIdx.x; t < c.total; t += gridDim.x) {
    const MxgTile T = mxg_decode(p, t, 256, c.ntn, c.tiles_m, g_start, g_pre, 128);
    named_bar_sync(3, 96);   // the previous tile's offsets are no longer read
    const int m0 = BAT ? g_pre[T.e] : 0, m1 = BAT ? g_pre[T.e + 1] : 0;
    if (gw == 0) {
      int cn[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int r = 8 * lane + i;
        cn[i] = ((f.terms & 1) && r < T.rows) ? f.cntA[T.row0 + r] : 0;
        if (BAT && cn[i] > 0) {
          const MxRes* row = f.resA + (mx_i64)(T.row0 + r) * f.slots;
          cn[i] = mxc_lower(row, cn[i], m1) - mxc_lower(row, cn[i], m0);
        }
      }
      mxc_offsets<8>(cn, F.offA, lane);
    } else if (gw == 1) {
      int cn[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int n = T.n0 + 4 * lane + i;
        const mx_i64 lr = (BAT ? 0 : (mx_i64)T.e * p.N) + n;
        cn[i] = ((f.terms & 2) && n < p.N) ? f.cntB[lr] : 0;
        if (BAT && cn[i] > 0) {
          const MxRes* row = f.resB + lr * f.slots;
          cn[i] = mxc_lower(row, cn[i], m1) - mxc_lower(row, cn[i], m0);
        }
      }
      mxc_offsets<4>(cn, F.offB, lane);
    }
    named_bar_sync(3, 96);
    const int nAt = F.offA[256], nBt = F.offB[128];
    int a0 = 0, b0 = 0;
    bool last;
    do {
      const int b = rc & 1;
      if (rc >= 2) mbar_wait_parked(&F.empty[b], ((rc >> 1) - 1) & 1);   // (parked: no spinning
                                                                          //  beside the consumers)
      MxcRound<U>& R = F.buf[b];
      const int nA = min(nAt - a0, U), nB = min(nBt - b0, (U - nA) >> 1);
      last = a0 + nA == nAt && b0 + nB == nBt;
      if (gt == 0) { R.nA = nA; R.nB = nB; R.last = last; R.o = T.row0 & 15; }
      for (int r = gt; r < 257 + 129; r += 96) {
        if (r < 257) R.oa[r] = (mx_u8)min(max(F.offA[r] - a0, 0), nA);
        else R.ob[r - 257] = (mx_u8)min(max(F.offB[r - 257] - b0, 0), nB);
      }
      // one thread per entry: its record, then the bulk copies of its window(s)
      for (int i = gt; i < nA + nB; i += 96) {
        const mx_u32 dst = smem_u32(R.raw + MXC_UNIT * (i < nA ? i : nA + 2 * (i - nA)));
        if (BAT && i < nA) {   // B's bytes at m and their column scales: the unit's two halves
          const int g = a0 + i, r = mxc_find(F.offA, 256, g);
          const MxRes* row = f.resA + (mx_i64)(T.row0 + r) * f.slots;
          // (the row's first entry in the segment is searched again here: no shared memory is
          // left beside the rounds for a per-row start, and the lists are short)
          const MxRes x = row[mxc_lower(row, f.cntA[T.row0 + r], m0) + (g - F.offA[r])];
          R.idx[i] = (mx_u8)r; R.v[i] = x.v;
          const mx_u32 bytes = (mx_u32)min(128, p.N - T.n0);   // (N % 16 == 0)
          mbar_expect_tx(&F.full[b], 2 * bytes);
          bulk_load(dst, Bt + (mx_i64)x.k * p.N + T.n0, bytes, &F.full[b]);
          bulk_load(dst + 128, f.sBo + (mx_i64)(x.k >> 5) * f.isr + T.n0, bytes, &F.full[b]);
        } else if (i < nA) {
          const int g = a0 + i, r = mxc_find(F.offA, 256, g);
          const MxRes x = f.resA[(mx_i64)(T.row0 + r) * f.slots + (g - F.offA[r])];
          const int nb = min(4, (p.N - T.n0 + 31) >> 5);
          const mx_i64 off = (mx_i64)T.e * f.bt_es + (mx_i64)x.k * p.N + T.n0;   // B's 128 bytes at k
          const mx_u8* src = nullptr;
          mx_u32 s4 = 0;
          if ((f.terms & (MXC_BT_REF | MXC_BT_FORM)) == (MXC_BT_REF | MXC_BT_FORM)) {
            // (the words are re-read per entry, not held: the gatherers run in 56 registers)
            const mx_u8* const* refs = reinterpret_cast<const mx_u8* const*>(f.Bt);
            const mx_u8* const mcf = refs[3];   // (null: the annexes were not filled together)
            // (32-bit offsets: a weight's counts and tile scales are 1/128 and 1/1024 of its
            // elements, under 2^31 for any weight that fits in a GPU's memory)
            if (mcf != nullptr && mcf[(T.n0 >> 7) * (int)f.mc_ss + T.e * (int)f.mc_es + x.k] == 0) {
              // the partner's row-stage (k, n0 / 128): its form's scale is one value for the stage
              const mx_u32 S = refs[2][T.e * (int)f.ise + (x.k >> 5) * ((p.N + 31) >> 5) + (T.n0 >> 5)];
              if (S != 0xFFu) {
                // (all four bytes, also past nb: the columns past N are never stored, and the
                // plain path's scale bytes there multiply stale bytes too; masking them to nb
                // made ptxas spill)
                src = refs[1] + off;
                s4 = S * 0x01010101u;
              }
            }
          }
          if (src == nullptr) {
            src = Bt + off;
            const mx_u8* sk = f.sBo + (mx_i64)T.e * f.ise + (mx_i64)(x.k >> 5) * f.isr + (mx_i64)(T.n0 >> 5) * f.isc;
#pragma unroll 1
            for (int q = 0; q < nb; ++q) s4 |= (mx_u32)sk[q * (int)f.isc] << (8 * q);
          }
          R.idx[i] = (mx_u8)r; R.v[i] = x.v; R.s4[i] = s4;
          const mx_u32 bytes = (mx_u32)min(128, p.N - T.n0);   // (N % 16 == 0)
          mbar_expect_tx(&F.full[b], bytes);
          bulk_load(dst, src, bytes, &F.full[b]);
        } else {
          const int g = b0 + i - nA, cl = mxc_find(F.offB, 128, g);
          const MxRes* row = f.resB + ((BAT ? 0 : (mx_i64)T.e * p.N) + T.n0 + cl) * f.slots;
          const MxRes x = row[(BAT ? mxc_lower(row, f.cntB[T.n0 + cl], m0) : 0) + (g - F.offB[cl])];
          R.idx[i] = (mx_u8)cl; R.v[i] = x.v;
          const mx_i64 w = (mx_i64)(T.row0 & ~15);
          mbar_expect_tx(&F.full[b], 2 * MXC_UNIT);
          bulk_load(dst, f.At + (mx_i64)x.k * f.ldt + w, MXC_UNIT, &F.full[b]);
          bulk_load(dst + MXC_UNIT, f.sAt + (mx_i64)(x.k >> 5) * f.ldt + w, MXC_UNIT, &F.full[b]);
        }
      }
      mbar_arrive(&F.full[b]);   // 96 arrivals, each after the thread's own writes and copies' expect-tx
      a0 += nA; b0 += nB; ++rc;
    } while (!last);
  }
}

// A round's terms on a consumer thread's outputs: rows wrow + {0, 8, 64, 72} (ascending) and
// columns 8 j + 2 (lane & 3) + {0, 1}; acc[64 (q >> 1) + 4 j + 2 (q & 1) + c] for row q,
// column (j, c). The round's offset tables give each row's and column's entries directly.
// PCS (wgrad): an A entry's unit holds B's column scales at +128 (one per column) instead of s4.
template <int FA, int FB, int U, bool PCS = false>
MX_DEV void mxc_apply(const MxcRound<U>& R, float* acc, int wrow, int lane, bool b_terms = true) {
  static_assert(U <= 255, "round offsets are bytes");
  const int nA = R.nA, nB = R.nB, cofs = 2 * (lane & 3);
  if (nA > 0) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int rq = wrow + 8 * (q & 1) + 64 * (q >> 1);
      const int end = R.oa[rq + 1];
      float* aq = acc + 64 * (q >> 1) + 2 * (q & 1);
      for (int i = R.oa[rq]; i < end; ++i) {
        const float v = R.v[i];
        const mx_u32 s4 = R.s4[i];
        const mx_u8* bv = R.raw + MXC_UNIT * i + cofs;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const mx_u32 b2 = *reinterpret_cast<const mx_u16*>(bv + 8 * j);
          if constexpr (PCS) {   // (exact: v times a power of two)
            const mx_u32 c2 = *reinterpret_cast<const mx_u16*>(bv + 128 + 8 * j);
            aq[4 * j] = fmaf(v * mx_e8m0_to_f32(c2 & 0xFFu), mx_fp8_value<FB>(b2 & 0xFFu), aq[4 * j]);
            aq[4 * j + 1] = fmaf(v * mx_e8m0_to_f32(c2 >> 8), mx_fp8_value<FB>(b2 >> 8), aq[4 * j + 1]);
          } else {
            const float sv = v * mx_e8m0_to_f32((s4 >> (8 * (j >> 2))) & 0xFFu);   // (exact: a power of two)
            aq[4 * j] = fmaf(sv, mx_fp8_value<FB>(b2 & 0xFFu), aq[4 * j]);
            aq[4 * j + 1] = fmaf(sv, mx_fp8_value<FB>(b2 >> 8), aq[4 * j + 1]);
          }
        }
      }
    }
  }
  if (nB == 0 || !b_terms) return;
  const int o = R.o;
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int cl = 8 * j + cofs + c, end = nA + R.ob[cl + 1];
      for (int k = nA + R.ob[cl]; k < end; ++k) {
        const float v = R.v[k];
        const mx_u8* col = R.raw + MXC_UNIT * (2 * k - nA) + o;   // unit nA + 2 (k - nA)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = wrow + 8 * (q & 1) + 64 * (q >> 1);
          const float a = mx_fp8_value<FA>(col[r]) * mx_e8m0_to_f32(col[MXC_UNIT + r]);
          float& out = acc[64 * (q >> 1) + 4 * j + 2 * (q & 1) + c];
          out = fmaf(a, v, out);
        }
      }
    }
}

// The A' B_res terms on the tensor cores (TCB, run 111). A round's B entries are a rank-nB
// update, out += P Q with P[r][i] = A'[r][k_i] (the MX value, from the entry's unit) and Q[i][c]
// = v_i where c is entry i's column, else 0; in slabs of 16 entries each consumer warpgroup
// writes its 128 rows of P and its own Q^T as bf16 (exact: MX values of at most 4 significant
// bits) and adds P Q to its accumulators with two m64n128k16 bf16 wgmmas (FP32 accumulation;
// products exact, each output gets one product per entry of its column). On the CUDA cores
// (mxc_apply) an entry costs every warp a pass with a quarter of its lanes (its column's lanes
// in each quad row) and the 32 columns' loops diverge: 2.5x the GEMM on Student-t(3) (run 105).
// Slab layout, K-major without swizzle (core matrices of 8 rows x 16 bytes): row r's entries
// 8h..8h+7 at ((r / 8) * 2 + h) * 128 + (r % 8) * 16; LBO (along K) 128, SBO (along M/N) 256.
template <int FA, int U>
MX_DEV void mxc_apply_b_tc(const MxcRound<U>& R, mx_u8* slab, float* acc, int wg, int lt) {
  const int nA = R.nA, nB = R.nB, o = R.o;
  const int tr = 128 * wg + lt;   // the tile row whose P row this thread writes
  mx_u8* P = slab;
  mx_u8* Q = slab + 4096;
  const int bar = 5 + wg;
  for (int s0 = 0; s0 < nB; s0 += 16) {
    named_bar_sync(bar, 128);   // the previous slab's wgmmas are complete in every warp
    mx_u32 w[8];
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      float v2[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int e = s0 + i + h;   // B entry nA + e: units nA + 2 e (A') and nA + 2 e + 1 (scales)
        v2[h] = 0.f;
        if (e < nB) {
          const mx_u8* u = R.raw + MXC_UNIT * (nA + 2 * e) + o + tr;
          v2[h] = mx_fp8_value<FA>(u[0]) * mx_e8m0_to_f32(u[MXC_UNIT]);
        }
      }
      w[i >> 1] = pack_bf16x2(v2[0], v2[1]);
    }
    const int rb = lt >> 3, r8 = lt & 7;
    *reinterpret_cast<uint4*>(P + (rb * 2) * 128 + r8 * 16) = make_uint4(w[0], w[1], w[2], w[3]);
    *reinterpret_cast<uint4*>(P + (rb * 2 + 1) * 128 + r8 * 16) = make_uint4(w[4], w[5], w[6], w[7]);
    // Q^T row c = lt: zero, then the slab's entries of that column
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    *reinterpret_cast<uint4*>(Q + (rb * 2) * 128 + r8 * 16) = z;
    *reinterpret_cast<uint4*>(Q + (rb * 2 + 1) * 128 + r8 * 16) = z;
    named_bar_sync(bar, 128);
    if (lt < 16 && s0 + lt < nB) {
      const int e = s0 + lt, c = R.idx[nA + e];
      const mx_u32 b = pack_bf16x2(R.v[nA + e], 0.f) & 0xFFFFu;
      *reinterpret_cast<mx_u16*>(Q + ((c >> 3) * 2 + (lt >> 3)) * 128 + (c & 7) * 16 + (lt & 7) * 2) = (mx_u16)b;
    }
    fence_proxy_async_smem();
    named_bar_sync(bar, 128);
    const mx_u32 ps = smem_u32(P), qs = smem_u32(Q);
    const mx_u64 dq = make_smem_desc(qs, 128, 256);
    reg_pin<128>(acc);
    wgmma_fence();
    wgmma_m64n128k16_bf16_acc(acc, make_smem_desc(ps, 128, 256), dq);
    wgmma_m64n128k16_bf16_acc(acc + 64, make_smem_desc(ps + 2048, 128, 256), dq);
    wgmma_commit();
    wgmma_wait<0>();
    reg_pin<128>(acc);
  }
}

// Waits for the next round (the consumers' sequence of rounds follows their tiles: while a
// tile's last round is not taken, the next one is this tile's), adds it, releases it; returns
// whether it was the tile's last. TCB: the B entries on the tensor cores (mxc_apply_b_tc).
template <int FA, int FB, class FS, bool TCB = false, bool PCS = false>
MX_DEV bool mxc_take(FS& F, int& fb, mx_u32& fph, float* acc, int wrow, int lane, int wg = 0, int lt = 0) {
  constexpr int U = FS::U;
  mbar_wait(&F.full[fb], fph);
  const bool last = F.buf[fb].last != 0;
  mxc_apply<FA, FB, U, PCS>(F.buf[fb], acc, wrow, lane, !TCB);
  if constexpr (TCB) mxc_apply_b_tc<FA, U>(F.buf[fb], F.tcb[wg], acc, wg, lt);
  mbar_arrive_warp(&F.empty[fb], lane);
  if (++fb == 2) { fb = 0; fph ^= 1; }
  return last;
}

// ---- the register epilogue with 16-byte stores (run 110) ----
// The four lanes of a quad hold one output row: lane q has columns 8 j + 2 q, + 1 of each of the
// tile's 16 chunks of 8 columns (j = 0..15). mxt_epilogue stores that as it lies, 4 bytes
// (bf16) per lane and instruction: 64 stores per thread per tile, each touching 8 rows'
// cache lines, which stalls the tensor core once per tile (the v2u kernel lost 6-7 % to it,
// run 25; this kernel has no shared memory left for a TMA-store epilogue). Transposed across
// the quad (three xor-shuffles per group of four chunks), lane q holds whole chunks 4 m + q and
// stores each as 16 bytes: a quarter of the store instructions, and each warp's store covers
// 64 contiguous bytes of 8 rows instead of 16.

// out[s] = a[s ^ q] (two conditional swaps).
MX_DEV void mxc_xor_perm4(const mx_u32* a, mx_u32* out, int q) {
  const bool b0 = (q & 1) != 0, b1 = (q & 2) != 0;
  const mx_u32 t0 = b0 ? a[1] : a[0], t1 = b0 ? a[0] : a[1];
  const mx_u32 t2 = b0 ? a[3] : a[2], t3 = b0 ? a[2] : a[3];
  out[0] = b1 ? t2 : t0; out[1] = b1 ? t3 : t1; out[2] = b1 ? t0 : t2; out[3] = b1 ? t1 : t3;
}
// v[t]: this lane's (quad lane q) part of chunk 4 m + t. Returns o[l] = lane l's part of chunk
// 4 m + q. Lane L sends, at xor-distance s, v_L[s ^ L]: the part its partner L ^ s stores.
// All 32 lanes must call it (full-mask shuffles).
MX_DEV void mxc_quad_transpose(const mx_u32* v, mx_u32* o, int q) {
  mx_u32 w[4], g[4];
  mxc_xor_perm4(v, w, q);
  g[0] = w[0];
  g[1] = __shfl_xor_sync(0xffffffffu, w[1], 1);
  g[2] = __shfl_xor_sync(0xffffffffu, w[2], 2);
  g[3] = __shfl_xor_sync(0xffffffffu, w[3], 3);
  mxc_xor_perm4(g, o, q);   // g[s] is lane q ^ s's part
}
// One 64-row block's accumulators (mxt_epilogue's layout, 64 per thread) to rows wrow, wrow + 8
// of tile T. Needs N % 8 == 0 and 16-byte aligned rows (ldo a multiple of 8 bf16 or 4 f32, out
// 16-byte aligned): the chained GEMM's launcher requires N % 16 == 0 and the backend passes
// ldo = N with cuMemAlloc'd outputs; anything else takes mxt_epilogue.
template <int OUT_BF16>
MX_DEV void mxc_epilogue_v4(const MxGemmParams& p, const MxgTile& T, const float* acc, int wrow, int lane) {
  const bool vec_ok = !(p.batched && p.out_t) && (p.N & 7) == 0 && (p.ldo & (OUT_BF16 ? 7 : 3)) == 0 &&
                      ((reinterpret_cast<mx_u64>(p.out) & 15) == 0);
  if (!vec_ok) { mxt_epilogue<OUT_BF16>(p, T, acc, wrow, lane); return; }
  const int q = lane & 3;
  const mx_i64 ob = p.batched ? (mx_i64)T.e * p.o_es : 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wrow + 8 * h;
    const bool row_ok = r < T.rows;
    const mx_i64 rowoff = ob + (mx_i64)(T.row0 + r) * p.ldo;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int col = T.n0 + 8 * (4 * m + q);
      const bool ok = row_ok && col < p.N;
      if (OUT_BF16) {
        mx_u32 v[4], o[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int j = 4 * m + t;
          v[t] = pack_bf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
        mxc_quad_transpose(v, o, q);
        if (ok) *reinterpret_cast<uint4*>(reinterpret_cast<mx_u16*>(p.out) + rowoff + col) = make_uint4(o[0], o[1], o[2], o[3]);
      } else {
        mx_u32 v0[4], v1[4], o0[4], o1[4];   // the column pair's first and second values
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int j = 4 * m + t;
          v0[t] = __float_as_uint(acc[4 * j + 2 * h]);
          v1[t] = __float_as_uint(acc[4 * j + 2 * h + 1]);
        }
        mxc_quad_transpose(v0, o0, q);
        mxc_quad_transpose(v1, o1, q);
        if (ok) {
          uint4* d = reinterpret_cast<uint4*>(reinterpret_cast<float*>(p.out) + rowoff + col);
          d[0] = make_uint4(o0[0], o1[0], o0[1], o1[1]);
          d[1] = make_uint4(o0[2], o1[2], o0[3], o1[3]);
        }
      }
    }
  }
}

// The TMA-store epilogue (tmO != nullptr; bf16 output, forward and dgrad): a full tile keeps its
// last stage's buffer instead of releasing it after the stage, and each consumer warpgroup stages
// its two 64 x 128 blocks, one after the other, in the 16 KB of A' rows it alone read there
// (mxt_epilogue_tma: two 64 x 64 boxes, 128-byte swizzle), so the stores run under the next
// tile's main loop instead of holding both warpgroups (and the tensor core) at the tile's end;
// the stage goes back to the producer once TMA has read the staging (the producer meanwhile
// fills the other stages with the next tile's). Partial tiles (an expert's last rows) take the
// register epilogue: a box would write the next expert's rows.
// fix == nullptr: no corrections (the harness's v8c diagnostic on stage-uniform operands).
// VEPI: the epilogue with 16-byte stores (mxc_epilogue_v4); false: mxt_epilogue (harness A/B).
// TCB: the A' B_res corrections on the tensor cores (mxc_apply_b_tc; 3 stages, no POLL).
template <int FA, int FB, int SB2D, int OUT_BF16, int STAGES = MXT8_STAGES, bool POLL = false, bool VEPI = true,
          bool TCB = false>
MX_DEV void mx_tgemm_chain_impl(const MxGemmTmaParams& P, const MxChainFix* fix, const MxTmap* tmO = nullptr) {
  typedef MxtLay256<SB2D> LAY;
  typedef MxcFix<STAGES, TCB> FS;
  static_assert(!TCB || (STAGES == 3 && !POLL), "the TCB slabs fit beside 3 stages; POLL would add them mid-loop");
  if (P.gate != nullptr && !mxt_chain_open(P)) return;   // the per-k32 kernel takes it
  const MxGemmParams& p = P.g;
  MX_DYN_SMEM(mxt_smem, 1024);
  __shared__ __align__(8) mx_u64 full[STAGES], empty[STAGES];
  __shared__ int g_start[MXC_MAX_E + 1], g_pre[MXC_MAX_E + 1];
  const int tid = threadIdx.x;
  const mx_u32 sbase = mxt_smem_base(mxt_smem);
  const mx_u8* sgen = mxt_smem + (sbase - smem_u32(mxt_smem));
  FS& F = *reinterpret_cast<FS*>(const_cast<mx_u8*>(sgen) + STAGES * LAY::STAGE);
  if (tid == 0 && fix != nullptr) {   // (mxt_setup's fence and barrier publish these)
    for (int b = 0; b < 2; ++b) { mbar_init(&F.full[b], 96); mbar_init(&F.empty[b], 8); }
  }
  mxt_setup(P, full, empty, STAGES, 8, LAY::BM, g_start, g_pre);
  if (tid >= 256) {
    setmaxnreg_dec<56>();
    if (tid == 256)
      mxt_produce<SB2D, STAGES, 0, LAY>(P, g_start, g_pre, sbase, blockIdx.x, gridDim.x, full, empty);
    else if (fix != nullptr && tid >= 288)
      mxc_gather<!SB2D>(p, *fix, F, g_start, g_pre, tid - 288);
    return;
  }
  setmaxnreg_inc<224>();
  const MxtCtx c = mxt_ctx(p, g_start, g_pre, LAY::BM, LAY::BN);
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  const int lt = tid & 127;
  const int warp = lt >> 5, lane = lt & 31;
  const int wrow = 128 * wg + 16 * warp + (lane >> 2);   // block 0's rows; block 1: wrow + 64
  int stage = 0; mx_u32 phase = 0;
  int fb = 0; mx_u32 fph = 0;   // the next correction round's buffer and parity
  const bool tma_epi = OUT_BF16 && VEPI && SB2D && !p.batched && tmO != nullptr;
  float acc[128], t0[64];
  for (int t = blockIdx.x; t < c.total; t += gridDim.x) {
    int nst;
    bool hold;   // the TMA-store epilogue keeps the last stage's buffer for its staging
    {
      const MxgTile T = mxg_decode(p, t, LAY::BM, c.ntn, c.tiles_m, g_start, g_pre, LAY::BN);
      nst = mxt_tile_stages(p, T, g_pre);
      hold = tma_epi && T.rows == LAY::BM && nst > 0;
    }
    int held = 0;
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    bool tdone = fix == nullptr;   // this tile's last correction round added
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
      if (hold && nst == 1) held = stage;
      else mbar_arrive_warp(&empty[stage], lane);
      if (++stage == STAGES) { stage = 0; phase ^= 1; }
      // POLL: a round of this tile that is ready is added now (its partial is dead here), so
      // that the gatherers stream through the main loop instead of queueing at its end
      if (POLL && fix != nullptr && !tdone && __shfl_sync(0xffffffffu, (int)mbar_test(&F.full[fb], fph), 0))
        tdone = mxc_take<FA, FB>(F, fb, fph, acc, wrow, lane);
    }
    while (!tdone) tdone = mxc_take<FA, FB, FS, TCB, !SB2D>(F, fb, fph, acc, wrow, lane, wg, lt);
    int te = t;
    asm volatile("" : "+r"(te));
    const MxgTile T = mxg_decode(p, te, LAY::BM, c.ntn, c.tiles_m, g_start, g_pre, LAY::BN);
    if (hold) {
      // (this warpgroup's A' rows of the held stage: its own wgmmas read them, and are complete)
      const mx_u32 sbuf = sbase + held * LAY::STAGE + wg * 2 * LAY::A_WG;
      mxt_epilogue_tma(p, T, acc, MxtStore{tmO, sbuf, wg, lt, 2 * wg}, lane);
      mxt_epilogue_tma(p, T, acc + 64, MxtStore{tmO, sbuf, wg, lt, 2 * wg + 1}, lane);   // (waits for the first's reads)
      if (lt == 0) bulk_wait_read<0>();
      named_bar_sync(1 + wg, 128);
      mbar_arrive_warp(&empty[held], lane);
    } else if (VEPI) {
      mxc_epilogue_v4<OUT_BF16>(p, T, acc, wrow, lane);
      mxc_epilogue_v4<OUT_BF16>(p, T, acc + 64, wrow + 64, lane);
    } else {
      mxt_epilogue<OUT_BF16>(p, T, acc, wrow, lane);
      mxt_epilogue<OUT_BF16>(p, T, acc + 64, wrow + 64, lane);
    }
  }
  if (tma_epi && lt == 0) bulk_wait<0>();
  mxt_zero_padding_rows<OUT_BF16>(p, g_start, tid);
}
