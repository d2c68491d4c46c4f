// mx_quant_block_form.cuh — 1x32 quantization of bf16 rows and the chained GEMM's A-side chain
// form in one pass, per 128 x 128 block (mx_quantize_rows_form_<fmt>): what a quantize call with
// an annex (ABI 1.3) for X or dY writes by default (src/backend/cuda/chain_quant.rs).
//
// Outputs: the MX tensor (q, s: the bytes and scales mx_quantize_rows_* writes) and what
// mx_reencode_block writes from them (the stage-uniform copy q2, s2, both transposed into at,
// sat, and per row and stage the residual count mc, which mx_chain_lists turns into the lists),
// and the chained GEMM's FP32 stage-major scale table sa (what mx_scales_to_f32_stages writes
// from s2: the CTA's 128 rows of one stage are 2 KB in one piece, so it costs no launch).
// A 128 x 128 block is one 128-deep stage of 128 rows, so a row's stage scale is in the CTA and
// nothing is carried from block to block: no running list, no scan (where mx_quant_chain.cuh,
// which walks a 32-row tile's stages in order and lists as it goes, is issue-bound, run 114).
// Traffic: 2 bytes read and 3 written per element, against 3 + 3 for the quantizer followed by
// mx_reencode_block. Same bytes as that pair (MXHOST_MX_CHAIN_VERIFY compares them).
//
// CTA: 256 threads; warp w holds block rows 16 w .. 16 w + 15, lane l = 16 hb + j the 8 columns
// 8 j .. 8 j + 7 of rows 16 w + 8 hb + i (i < 8): a 1x32 block is 4 lanes, a row's stage 16.
// The thread's 8 x 8 bytes of q2 are transposed in registers (4x4 byte transposes) and stored
// as 8-byte words into a [128 columns][32 words] shared tile, the 4-row group index XORed with
// 2 (c / 8 mod 16) (two wavefronts per warp store); transposed rows leave as 16-byte stores.
// Requires C % 32 == 0, R % 16 == 0, the input 16-byte aligned (the host checks).
// BPC (blocks per CTA, mx_quantize_rows_form4_*: 4, opt-in MXHOST_MX_CHAIN_FORM4=1): the CTA
// walks BPC consecutive 128-column blocks of its 128 rows and keeps their scale bytes (s, s2) in
// shared memory, then writes each row's 4 BPC bytes of both arrays in one warp store per two
// rows. With one block per CTA each row's 4 bytes of s and of s2 are a store request of their
// own, as many L2 requests as the block's q and q2 rows together, for 1/64 of the bytes (run
// 125 found the kernel bound by L2 requests); BPC = 4 makes those 4x fewer.
// WV (mx_quantize_rows_form_wv_*, BPC = 1 only): also wv, the values mx_fakequant_m32 writes with
// the blocks (32 k, min(32, R - 32 k)) (wgrad's X), bit for bit: a 32-row group of the block is
// warps 2 g and 2 g + 1, so the 4 threads of a column group each put their 8 rows' partial
// column amax in shared memory before the barrier after the loads, and after it read the four;
// each then fake-quantizes its rows beside their 1x32 quantization, from the same registers.
// Rows past R are zeros for the amax and not written. 80 registers (3 CTAs per SM) against the
// plain build's 64: at 64, ptxas spills ~280 bytes (raw, q2 and the 16 fast-path factors live).
// NOQ (mx_quantize_rows_form_noq_*, mx_quantize_rows_form_wv_noq_*): the MX tensor's bytes q are
// stored only for the row-stages the chain form cannot give back, those with a residual (a byte
// the shift to the stage scale loses: mc > 0) or a non-finite stage scale (S = 0xFF); every
// other byte is q2 shifted back by S - s exactly (mx_plain_from_form.cuh writes them when
// someone reads them). mx_chain_lists reads q only in row-stages with mc > 0, so the lists are
// the same. One byte per element less written (of 5; 7 with WV). NOQ builds do not write s2
// either: it is sat transposed, and its one reader for such a tensor, mx_plain_from_form, reads
// sat (docs/perf.md run 193: the per-row scale-byte stores, each a partial 32-byte sector, cost
// 8 % of the WV kernel's time for 1.6 % of its bytes; s2 is half of them). A NOQ build given no
// s (p.s null: the MX tensor's scales on demand too, plugin ABI 1.8) writes s transposed into
// the s2 buffer instead, [C / 32][R] as sat, whole sectors; mx_plain_from_form writes s from it.
// Need map (plugin ABI 1.9): the chained GEMM reads at only in its B-residual corrections, at the
// reduction indices k where the weight has a residual and for the rows of the experts whose
// weight has one there; mx_chain_need_map (mx_chain_need.cuh) ORs those k into a bit map per
// expert. Given it (p.need), the kernel stores a 16-row chunk of at's column k only where one of
// the chunk's experts needs k, and leaves the rest unwritten (at was 17 % of the kernel's time
// on shape c); every other output is written whole. Before the block loop threads 0-7 OR their
// chunk's words for the CTA's columns into shared memory (a binary search over the experts' end
// rows, then the chunk's experts), so the store loop tests one bit. (Done inside the loop, behind
// the loads, ptxas took the BPC = 4 build from 62 registers to 100.)
// PF (mx_quantize_rows_form_wv_noq_pf_*, opt-in MXHOST_MX_FORM_PREFETCH=1; the WV NOQ build with
// one block at a time): the CTA walks its row block's 128-column blocks bx = blockIdx.x,
// blockIdx.x + gridDim.x, ... (a grid of a few CTAs per row block instead of one CTA per block)
// and loads the next block's input into registers right after the current one's first barrier,
// so those loads are in flight while it quantizes and stores the current block (run 184: the
// one-block build took the same time on an H200's 43 % more bandwidth: bound by latency). Its
// need words are double-buffered (a block's are written while the previous block's are read).
// Same arithmetic and stores, so the same bytes as the one-block build.
// Requires mx_quant_blocks.cuh, mx_reencode.cuh and (WV) mx_fakequant.cuh. NVRTC-clean.
#pragma once

// Cache hints for timing (MXHOST_NVRTC_DEFINES, docs/perf.md run 174): MXQB_STCS stores the
// written-once outputs (q, q2, wv, at) evict-first (st.global.cs), MXQB_LDCS loads the input
// so (ld.global.cs) instead of through the read-only path. Off by default.
#ifdef MXQB_STCS
#define MXQB_ST(ptr, v) __stcs(ptr, v)
#else
#define MXQB_ST(ptr, v) (*(ptr) = (v))
#endif
#ifdef MXQB_LDCS
#define MXQB_LD(ptr) __ldcs(ptr)
#else
#define MXQB_LD(ptr) __ldg(ptr)
#endif
// Knock-outs for a cost breakdown under ncu (MXHOST_NVRTC_DEFINES=-DMXQB_KO=bits, docs/perf.md
// run 193; never for results: the outputs left out stay unwritten): 1 the transposed copy at,
// 2 the wgrad values wv, 4 the per-row scale bytes s and s2 (one byte per thread and row).
#ifndef MXQB_KO
#define MXQB_KO 0
#endif
// Timing variant (docs/perf.md run 193): MXQB_SCOAL=1 makes the one-block builds gather their
// scale bytes s, s2 in shared memory and write them as the BPC > 1 builds do (32 requests per
// CTA of up to 8 sectors each, against 128 of 2 from the per-thread byte stores). Same bytes.
#ifndef MXQB_SCOAL
#define MXQB_SCOAL 0
#endif
// Timing variant (docs/perf.md run 194): MXQB_NOQ_S2=1 makes the NOQ builds write s2 as the
// others do (as before run 194), for an A/B in one dist. Unread either way.
#ifndef MXQB_NOQ_S2
#define MXQB_NOQ_S2 0
#endif

struct MxQuantBlockFormParams {
  const mx_u16* in;        // [R][C] bf16
  mx_u8* q; mx_u8* s;      // the MX tensor: [R][C], [R][C / 32]
  mx_u8* q2; mx_u8* s2;    // the stage-uniform copy, same layouts (NOQ: s2 unwritten; with s
                           //   null, s transposed [C / 32][R] instead)
  mx_u8* at; mx_u8* sat;   // q2 and s2 transposed: [C][R], [C / 32][R]
  mx_u8* mc;               // residuals per row and stage: mc[(c / 128) * R + r]
  int* status;             // this kernel ORs MX_RES_NONFINITE into status[0]
  float* sa;               // s2 as FP32, stage-major: sa[(c / 128) * 4 R + 4 r + (c / 32) % 4]
                           //   (0 for the blocks past C / 32 of the last stage); 16-byte aligned
  int R, C, mode;
  mx_u16* wv;              // WV builds: X fake-quantized in 32x1 blocks along R for wgrad, [R][C] bf16
  // Need map (plugin ABI 1.9, a partner weight given at the quantize call): the 16-row chunk
  // of at at column k is stored only where need[e * nw + k / 32] has bit k % 32 for some
  // expert e with rows in the chunk (offs: the E experts' cumulative END rows; rows at or past
  // offs[E - 1] belong to none and are never stored). need null: all of at, as before.
  const mx_u32* need; const int* offs; int E; int nw;
};

// The first expert whose rows end past row r (offs: cumulative end rows), E when none does.
MX_DEV int mxqb_expert_of(const int* offs, int E, int r) {
  int lo = 0, hi = E;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (__ldg(offs + mid) > r) hi = mid; else lo = mid + 1;
  }
  return lo;
}

// The need words of chunk rows r .. r + 15 for NW 32-column groups from word w0 (bit i of word
// k: column 32 (w0 + k) + i), into out: the OR over the experts with rows in the chunk; all
// ones without a need map. An expert without rows is left out: its weight may have residuals
// all the same, which no row of this chunk reads.
template <int NW>
MX_DEV void mxqb_chunk_need(const MxQuantBlockFormParams& p, int r, int w0, mx_u32* out) {
  mx_u32 w[NW];
#pragma unroll
  for (int k = 0; k < NW; ++k) w[k] = p.need == nullptr ? ~0u : 0u;
  if (p.need != nullptr) {
    int start = r;   // the first chunk row past the experts before e
    for (int e = mxqb_expert_of(p.offs, p.E, r); e < p.E; ++e) {
      const int end = __ldg(p.offs + e);
      if (end > start) {
        const mx_u32* row = p.need + (mx_i64)e * p.nw;
#pragma unroll
        for (int k = 0; k < NW; ++k)
          if (w0 + k < p.nw) w[k] |= __ldg(row + w0 + k);
      }
      if (end > r + 15) break;   // the chunk ends in this expert
      start = end;
    }
  }
#pragma unroll
  for (int k = 0; k < NW; ++k) out[k] = w[k];
}

// (a, b, c, d: byte k of word x is column k of one row) -> column q of the four rows.
MX_DEV mx_u32 mxqb_col(mx_u32 a, mx_u32 b, mx_u32 c, mx_u32 d, int q) {
  const mx_u32 sel = (mx_u32)q | ((mx_u32)(q + 4) << 4);
  return __byte_perm(__byte_perm(a, b, sel), __byte_perm(c, d, sel), 0x5410);
}

// WV: the scale bytes of this thread's 8 wv columns (slo: columns 0..3, shi: 4..7, a byte each,
// as mxfq_values8 takes them) from part, every thread's partial column amax over its 8 rows (bf16
// pairs); the 4 partials of this thread's 32-row group g are 64 g + j + 16 k. Returns whether
// the fast path is valid for all 8 columns.
template <int FMT>
MX_DEV bool mxqb_wv_scales(const MxQuantBlockFormParams& p, const uint4* part, mx_u32& slo, mx_u32& shi) {
  const int t = threadIdx.x, g = t >> 6, j = t & 15;
  mx_u32 m[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint4 v = part[64 * g + j + 16 * k];
    m[0] = mxq_max_u16x2(m[0], v.x); m[1] = mxq_max_u16x2(m[1], v.y);
    m[2] = mxq_max_u16x2(m[2], v.z); m[3] = mxq_max_u16x2(m[3], v.w);
  }
  slo = 0u; shi = 0u;
  bool fast = true;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const mx_u32 am = (e & 1) ? (m[e >> 1] & 0xFFFF0000u) : (m[e >> 1] << 16);
    const mx_u32 sb = mx_scale_byte<FMT, true>(am, p.mode);
    if (e < 4) slo |= sb << (8 * e); else shi |= sb << (8 * (e - 4));
    fast = fast && mxfq_fast_ok<FMT>(sb, am);
  }
  // (per thread: where the fast path is valid it gives the reference path's bits, so the
  // choice does not change a value; mx_fakequant_m32 makes it per warp)
  return fast;
}

// The thread's 8 rows (from row r) x 8 bf16 columns (from col) of the input; zeros past R or C.
MX_DEV void mxqb_load(const MxQuantBlockFormParams& p, int r, int col, mx_u32 (&raw)[8][4]) {
  const bool col_ok = col < p.C;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint4 v = col_ok && r + i < p.R ? MXQB_LD(reinterpret_cast<const uint4*>(p.in + (mx_i64)(r + i) * p.C + col))
                                          : make_uint4(0u, 0u, 0u, 0u);
    raw[i][0] = v.x; raw[i][1] = v.y; raw[i][2] = v.z; raw[i][3] = v.w;
  }
}

template <int FMT, int BPC = 1, int WV = 0, int NOQ = 0, int PF = 0>
MX_DEV void mx_quant_block_form(const MxQuantBlockFormParams& p) {
  static_assert(!WV || BPC == 1, "wv: one block per CTA");
  static_assert(!PF || (BPC == 1 && !MXQB_SCOAL), "prefetch: one block at a time, scale bytes stored directly");
  __shared__ __align__(16) mx_u32 sm[128 * 32];   // q2 transposed: word (column, 4-row group)
  __shared__ int rowc[128];                       // residuals per block row
  __shared__ mx_u8 ssat[4][128];                  // the block's sat bytes [k32 block][row]
  __shared__ mx_u8 sst[NOQ ? 4 : 1][128];         // NOQ: its s bytes, the same way
  constexpr bool SS = BPC > 1 || MXQB_SCOAL;     // scale bytes gathered in shared memory
  __shared__ mx_u8 ss[SS ? 2 : 1][128][SS ? 4 * BPC : 1];   // SS: s, s2 [row][k32]
  __shared__ uint4 wvpart[WV ? 256 : 1];          // WV: each thread's partial column amax
  __shared__ mx_u32 need[PF ? 2 : 1][8][4 * BPC];   // at's need words [16-row chunk][32-column group]
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int hb = lane >> 4, j = lane & 15;
  const int r0 = blockIdx.y * 128;
  const int R = p.R, C = p.C, KB = C >> 5;
  const int rb = 16 * warp + 8 * hb;   // the thread's first block row
  // the need words of the CTA's columns, once: its blocks share their rows (the first barrier
  // below publishes them); PF: each block's, in the loop
  if (!PF && t < 8) mxqb_chunk_need<4 * BPC>(p, r0 + 16 * t, blockIdx.x * 4 * BPC, need[0][t]);
  const int nbx = (C + 127) >> 7;
  mx_u32 raw[8][4];
  if constexpr (PF) {
    if ((int)blockIdx.x < nbx) mxqb_load(p, r0 + rb, blockIdx.x * 128 + 8 * j, raw);
  }
  for (int jb = 0;; ++jb) {
    // this iteration's 128-column block (one stage)
    const int bx = PF ? (int)blockIdx.x + jb * (int)gridDim.x : (int)blockIdx.x * BPC + jb;
    if (PF ? bx >= nbx : jb >= BPC) break;
    const int c0 = bx * 128;
    if (c0 >= C) break;
    mx_u32 (&nd)[8][4 * BPC] = need[PF ? (jb & 1) : 0];
    const int nj = PF ? 0 : jb;   // the block's need words in nd's rows
    if (PF && t < 8) mxqb_chunk_need<4 * BPC>(p, r0 + 16 * t, bx * 4, nd[t]);
    // (no barrier between blocks: this block writes sm, ssat and rowc's counts only after the
    // barrier below, and resets rowc[t] in the thread that read it for the last block's mc;
    // PF: wvpart is read before the last block's second barrier, which every thread writing it
    // here has passed, while need is read after it, hence its two buffers)
    const int col = c0 + 8 * j, kb = col >> 5;
    const bool col_ok = col < C;   // (C % 32 == 0: a 1x32 block is whole or absent)
    if (t < 128) rowc[t] = 0;
    if constexpr (!PF) mxqb_load(p, r0 + rb, col, raw);
    if constexpr (WV) {
      mx_u32 a[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        a[k] = raw[0][k] & 0x7FFF7FFFu;
#pragma unroll
        for (int i = 1; i < 8; ++i) a[k] = mxq_max_u16x2(a[k], raw[i][k] & 0x7FFF7FFFu);
      }
      wvpart[t] = make_uint4(a[0], a[1], a[2], a[3]);
    }
    __syncthreads();   // rowc, wvpart, need
    // PF: the next block's input, in flight while this one is quantized and stored
    mx_u32 nxt[PF ? 8 : 1][4];
    if constexpr (PF) {
      const int bn = bx + (int)gridDim.x;
      if (bn < nbx) mxqb_load(p, r0 + rb, bn * 128 + 8 * j, nxt);
    }
    mx_u32 wlo = 0u, whi = 0u;
    bool wfast = false;
    float inv[WV ? 8 : 1], sc[WV ? 8 : 1];
    if constexpr (WV) {
      wfast = mxqb_wv_scales<FMT>(p, wvpart, wlo, whi);
      if (wfast) mxfq_factors8(wlo, whi, inv, sc);
    }
    mx_u32 q2[8][2];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = r0 + rb + i;
      const bool ok = col_ok && r < R;
      mx_u32 am = mxq_chunk_amax<1>(raw[i]);
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 2));
      const mx_u32 sb = col_ok ? mx_scale_byte<FMT, true>(am, p.mode) : 0u;
      mx_u32 q[2];
      mxq_quant_chunk<1, FMT>(raw[i], sb, q);
      if constexpr (WV) {
        mx_u32 o[4];
        mxfq_values8<1, FMT>(raw[i], wlo, whi, wfast, inv, sc, o);
        if (ok && !(MXQB_KO & 2)) MXQB_ST(reinterpret_cast<uint4*>(p.wv + (mx_i64)r * C + col), make_uint4(o[0], o[1], o[2], o[3]));
      }
      mx_u32 S = max(sb, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)sb, 4));
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 8));
      // Both words by the shift's fast path without a branch; the exact route and the residual
      // count only for a word with a byte off it (a miss needs one), as mx_reencode_pair.cuh
      // does (docs/perf.md run 189: a branch per shift and count cost the weight's kernel 17 %
      // of its instructions). Past R or C the bytes are zeros: no rest, no miss.
      mx_u32 r0w, r1w, m0 = 0u, m1 = 0u;
      mx_u32 a0 = mx_fp8_shift4_fast<FMT>(q[0], S - sb, r0w);
      mx_u32 a1 = mx_fp8_shift4_fast<FMT>(q[1], S - sb, r1w);
      if ((r0w | r1w) != 0u && ok) {
        a0 = mx_fp8_shift4<FMT>(q[0], S - sb, m0);
        a1 = mx_fp8_shift4<FMT>(q[1], S - sb, m1);
        const int nm = __popc(m0) + __popc(m1);
        if (nm) atomicAdd(&rowc[rb + i], nm);
      }
      q2[i][0] = ok ? a0 : 0u;
      q2[i][1] = ok ? a1 : 0u;
      bool store_q = true;
      if constexpr (NOQ != 0) {
        // the row-stage's 16 lanes (a half warp: xor distances below 16 stay in it); the
        // shuffles only in a warp that lost a byte anywhere (rare)
        mx_u32 lost = m0 | m1;
        if (__ballot_sync(0xffffffffu, lost != 0u) != 0u) {
          lost |= (mx_u32)__shfl_xor_sync(0xffffffffu, (int)lost, 1);
          lost |= (mx_u32)__shfl_xor_sync(0xffffffffu, (int)lost, 2);
          lost |= (mx_u32)__shfl_xor_sync(0xffffffffu, (int)lost, 4);
          lost |= (mx_u32)__shfl_xor_sync(0xffffffffu, (int)lost, 8);
        }
        store_q = lost != 0u || S == 0xFFu;
      }
      if (ok) {
        const mx_i64 o = (mx_i64)r * C + col;
        if (store_q) MXQB_ST(reinterpret_cast<uint2*>(p.q + o), make_uint2(q[0], q[1]));
        MXQB_ST(reinterpret_cast<uint2*>(p.q2 + o), make_uint2(q2[i][0], q2[i][1]));
        if ((j & 3) == 0) {
          if constexpr (SS) {
            ss[0][rb + i][4 * jb + (j >> 2)] = (mx_u8)sb;
            ss[1][rb + i][4 * jb + (j >> 2)] = (mx_u8)S;
          } else if (!(MXQB_KO & 4)) {
            if (NOQ == 0 || p.s != nullptr) p.s[(mx_i64)r * KB + kb] = (mx_u8)sb;
            if (NOQ == 0 || (MXQB_NOQ_S2 && p.s != nullptr)) p.s2[(mx_i64)r * KB + kb] = (mx_u8)S;
          }
          ssat[j >> 2][rb + i] = (mx_u8)S;
          if constexpr (NOQ != 0) sst[j >> 2][rb + i] = (mx_u8)sb;
          if (S == 0xFFu) atomicOr(p.status, MX_RES_NONFINITE);
        }
      }
    }
    // 8 x 8 bytes -> 8 columns of 8 rows (two 4-row words each) -> shared tile
    const int g = 2 * (4 * warp + 2 * hb);   // word of rows rb .. rb + 3 in a column's 32
#pragma unroll
    for (int cc = 0; cc < 8; ++cc) {
      const int h = cc >> 2, q = cc & 3;
      const mx_u32 lo = mxqb_col(q2[0][h], q2[1][h], q2[2][h], q2[3][h], q);
      const mx_u32 hi = mxqb_col(q2[4][h], q2[5][h], q2[6][h], q2[7][h], q);
      const int c = 8 * j + cc;
      *reinterpret_cast<uint2*>(&sm[c * 32 + ((g >> 1) ^ (2 * j))]) = make_uint2(lo, hi);
    }
    __syncthreads();
    // transposed rows: thread t writes column c of 4 (t / 8 + 32 k), block rows 16 m .. 16 m + 15
    // where the chunk needs it (column c0 + c is bit t / 8 of the chunk's need word k)
    const int m = t & 7;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int c = (t >> 3) + 32 * k;
      const int f = 2 * ((c >> 3) & 15);
      uint4 v = *reinterpret_cast<const uint4*>(&sm[c * 32 + 4 * (m ^ (f >> 2))]);
      if (f & 2) { mx_u32 x = v.x; v.x = v.z; v.z = x; x = v.y; v.y = v.w; v.w = x; }
      const bool needed = (nd[m][4 * nj + k] >> (t >> 3)) & 1u;
      if (needed && c0 + c < C && r0 + 16 * m < R && !(MXQB_KO & 1)) MXQB_ST(reinterpret_cast<uint4*>(p.at + (mx_i64)(c0 + c) * R + r0 + 16 * m), v);
    }
    // sat from shared memory, a block's rows on consecutive threads (run 120's ncu: this kernel
    // is L2-bound, 88 %, and a byte store per thread and row put 8 sectors per warp store)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int i = t + 256 * k, rr = i & 127, b = i >> 7;
      if (r0 + rr < R && (c0 >> 5) + b < KB) {
        p.sat[(mx_i64)((c0 >> 5) + b) * R + r0 + rr] = ssat[b][rr];
        if (NOQ != 0 && p.s == nullptr) p.s2[(mx_i64)((c0 >> 5) + b) * R + r0 + rr] = sst[b][rr];
      }
    }
    if (t < 128 && r0 + t < R) {
      p.mc[(mx_i64)bx * R + r0 + t] = (mx_u8)rowc[t];
      // this stage's table row for block row t (ssat holds only the blocks inside the tensor)
      float v[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) v[b] = (c0 >> 5) + b < KB ? mx_e8m0_to_f32(ssat[b][t]) : 0.f;
      *reinterpret_cast<float4*>(p.sa + (mx_i64)bx * 4 * R + 4 * (r0 + t)) = make_float4(v[0], v[1], v[2], v[3]);
    }
    if constexpr (PF) {
      if (bx + (int)gridDim.x < nbx) {
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int k = 0; k < 4; ++k) raw[i][k] = nxt[i][k];
      }
    }
  }   // blocks of the CTA
  if constexpr (SS) {
    // each row's scale bytes of the CTA's blocks: lanes 16 h .. 16 h + 15 write one row's bytes
    // of one array (one request, two if they cross a line)
    __syncthreads();
    constexpr int NB = 4 * BPC;
    const int kb0 = blockIdx.x * NB, nkb = min(NB, KB - kb0);
#pragma unroll 4
    for (int i = t; i < (NOQ && !MXQB_NOQ_S2 ? 1 : 2) * 128 * NB; i += 256) {   // (NOQ: s only)
      const int a = i / (128 * NB), rr = (i / NB) % 128, b = i % NB;
      // (NOQ with s null: s went transposed into s2 above, and neither is written here)
      if (b < nkb && r0 + rr < R && (NOQ == 0 || p.s != nullptr)) (a ? p.s2 : p.s)[(mx_i64)(r0 + rr) * KB + kb0 + b] = ss[a][rr][b];
    }
  }
}
