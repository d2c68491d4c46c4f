// mx_reencode_pair.cuh — the chain forms (mx_reencode.cuh) of a weight in 32x32 tiles and of
// its transposed copy, from one read of the weight's bytes, for a quantize call that writes both
// with their annexes (src/backend/cuda/chain_pair.rs).
//
// The four launches it replaces (a re-encoding and a transpose of the original bytes per copy)
// read the bytes four times and write them four times. Here one 128 x 128 block of W per CTA
// holds everything both forms need: a 32x32 tile has one scale, so W's 128-deep stage along its
// reduction (C) is the block's row of four tiles and the transposed copy's stage along R is its
// column of four tiles; each stage's largest scale is a max over those four. The CTA writes
//   q2  (W re-encoded along C, [E][R][C])      qt2 (Wᵀ re-encoded along R, [E][C][R])
//   btt (W's own bytes: Wᵀ's annex keeps them)  bt  (W transposed: W's annex keeps it)
// plus both copies' stage scale bytes and, per row and stage, how many elements did not survive
// the shift (mc, mct: the residuals). Those are rare, and a row's list must be in reduction
// order, which no single block sees: mx_chain_lists then walks each row's counts and re-reads
// only the stages that have residuals, writing the records exactly as mx_reencode_rows does.
// So every byte equals the four launches' (MXHOST_MX_CHAIN_VERIFY compares them).
// Traffic: 1 byte read and 4 written per element, against 4 and 4; 2 written without the copies
// (COPIES = false, mx_reencode_pair_ref_*: annexes of ABI 1.4 that refer to their partner's
// bytes instead of copying them; bt and btt unused). Two instantiations, not a runtime test:
// with the stores predicated at run time ptxas kept 98 registers instead of 48 (run 127).
// NOQ (mx_quantize_pair_bf16_noq_e4m3, SRC = 1 only): W's and Wᵀ's own bytes (btt, bt: the two
// output tensors) are stored only in the row-stages their forms cannot give back, those with a
// residual (mc, mct > 0) or a non-finite stage scale, as mx_quant_block_form.cuh's NOQ does for
// X and dY: every other byte is its form's byte shifted back (mx_plain_from_form.cuh writes them
// when someone reads them), and the chained GEMM's corrections read the partner's form there
// instead (MXC_BT_FORM, mx_tgemm_chain.cuh). W's stores wait for the barrier after the counts.
// Per element 2 bytes read and 2 written (both forms; beside them the scales and counts) instead
// of 2 and 4.
// Requires mx_ptx.cuh, mx_numerics.cuh, mx_reencode.cuh and mx_quant_blocks.cuh. NVRTC-clean.
#pragma once

// W [E][R][C] in 32x32 tiles, scales s[e][R/32][C/32] (the quantizer's tile layout); the
// transposed copy's scales are st[e][C/32][R/32]. R % 16 == 0, C % 16 == 0.
struct MxReencodePairParams {
  const mx_u8* q; const mx_u8* s;
  mx_u8* q2; mx_u8* s2;       // W's form: copy [E][R][C], scale bytes in s's layout
  mx_u8* qt2; mx_u8* st2;     // Wᵀ's form: copy [E][C][R], scale bytes in st's layout
  mx_u8* bt; mx_u8* btt;      // W transposed [E][C][R]; W's bytes [E][R][C] (COPIES only)
  mx_u8* mc; mx_u8* mct;      // residuals per row and stage: mc[(c / 128) * E R + e R + r],
                              //   mct[(r / 128) * E C + e C + c]
  int* status; int* status_t; // each copy's status words (this kernel ORs MX_RES_NONFINITE)
  int R, C;                   // E = gridDim.z
};

// SRC = 1 (mx_quantize_pair_bf16_e4m3): the kernel quantizes W itself, from bf16, in 32x32
// tiles (the tile quantizer's bytes and scales: same helpers), instead of reading the bytes and
// scales another launch wrote; W's bytes go to btt and Wᵀ's to bt (COPIES), their scales here.
// One read of 2 bytes and four writes of 1 per element, against 2 + 2 (mx_quantize_t32l) and
// 1 + 2 (mx_reencode_pair_ref) in two launches.
struct MxQuantPairSrc {
  const mx_u16* in;   // W [E][R][C] bf16, 16-byte aligned (cp.async; the host checks), C % 16 == 0
  mx_u8* s;           // W's tile scales [E][R/32][C/32]
  mx_u8* st;          // Wᵀ's tile scales [E][C/32][R/32]
  int mode, pad;
};
struct MxQuantPairParams { MxReencodePairParams f; MxQuantPairSrc src; };

// Grid (ceil(C / 128), ceil(R / 128), E), 256 threads. Thread (warp w, lane l) holds the words
// of rows 16 w + i (i < 16) at bytes 4 l .. 4 l + 3 of the block: all in tile (w / 2, l / 8).
// The transposes go through shared memory as mx_transpose_u8 does (4x4 byte transposes in
// registers, swizzled words, 16-byte stores along the transposed rows: mx_t128_put/get).
template <int FMT, bool COPIES, int SRC = 0, int NOQ = 0>
MX_DEV void mx_reencode_pair(const MxReencodePairParams& p, const MxQuantPairSrc* src = nullptr) {
  static_assert(!SRC || COPIES, "SRC = 1 writes W's and Wᵀ's bytes through btt and bt");
  static_assert(!NOQ || SRC, "NOQ leaves out the output tensors' bytes (SRC = 1)");
  constexpr int T1 = COPIES ? 1 : 0;                  // Wᵀ's copy's tile
  __shared__ __align__(16) mx_u32 sm[T1 + 1][128 * 32];   // (COPIES: W transposed;) Wᵀ's copy
  __shared__ mx_u32 tile_s[4][4];                     // the block's tile scales [r tile][c tile]
  __shared__ int rowc[128], colc[128];                // residuals per row of W, per column
  __shared__ mx_u32 tam[SRC ? 8 : 1][4];              // SRC: amax bits per warp and tile column
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int e = blockIdx.z, c0 = blockIdx.x * 128, r0 = blockIdx.y * 128;
  const int R = p.R, C = p.C, NB = (R + 31) >> 5, KB = (C + 31) >> 5;
  const mx_i64 tiles_e = (mx_i64)NB * KB;
  const int ta = warp >> 1, tb = lane >> 3;
  const bool rows_ok = r0 + 16 * warp < R;   // R % 16 == 0: a warp's 16 rows are all in or out
  const bool word_ok = rows_ok && c0 + 4 * lane < C;
  const mx_i64 row0 = (mx_i64)e * R + r0 + 16 * warp;
  mx_u32 w[16];
  if constexpr (SRC != 0) {
    // the thread's 16 rows x 4 elements, then its tile's amax (8 lanes of two warps). The bf16
    // words wait for the scale in shared memory (thread-interleaved 8-byte slots, no bank
    // conflicts), not registers: held there they took the kernel to 92 registers, 2 CTAs per SM.
    // They get there by cp.async, all 32 KB of the block in flight at once: loaded through
    // registers, 51 of them let ptxas keep only 10 of the 16 loads in flight, and the warps
    // spent 41 % of their time waiting on them (run 145). Slot (i, t) holds row 16 w + i's
    // elements 4 l .. 4 l + 3, so the slots of lanes 2 m and 2 m + 1 are one 16-byte chunk:
    // lane l copies chunk m = l % 16 of rows 2 k + l / 16 (k < 8), its warp's rows only (a
    // warp reads back only its own slots: __syncwarp is the barrier). C % 16 == 0, so a chunk
    // is all in the tensor or all out (then zeros, as the loads gave).
    static_assert(!SRC || (T1 + 1) * 128 * 32 >= 16 * 256 * 2, "the staging fits the transpose tiles");
    mx_u32* xs = &sm[0][0];
    {
      const int m = lane & 15;
      const bool chunk_ok = rows_ok && c0 + 8 * m < C;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int i = 2 * k + (lane >> 4);
        const mx_u16* g = chunk_ok ? src->in + (row0 + i) * C + c0 + 8 * m : src->in;
        mx_copy16_async(xs + 2 * (i * 256 + 32 * warp + 2 * m), g, chunk_ok);
      }
      mx_copy_async_wait_all();
      __syncwarp();
    }
    mx_u32 am = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint2 v = *reinterpret_cast<const uint2*>(xs + 2 * (i * 256 + t));
      const mx_u32 ch[4] = {v.x, v.y, 0u, 0u};
      am = max(am, mxq_chunk_amax<1>(ch));
    }
    am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
    am = max(am, __shfl_xor_sync(0xffffffffu, am, 2));
    am = max(am, __shfl_xor_sync(0xffffffffu, am, 4));
    if ((lane & 7) == 0) tam[warp][tb] = am;
    if (t < 128) { rowc[t] = 0; colc[t] = 0; }
    __syncthreads();
    if (t < 16) {
      const int a = t >> 2, b = t & 3, nb = (r0 >> 5) + a, kb = (c0 >> 5) + b;
      const bool ok = nb < NB && kb < KB;
      const mx_u32 v = ok ? mx_scale_byte<FMT, true>(max(tam[2 * a][b], tam[2 * a + 1][b]), src->mode) : 0u;
      tile_s[a][b] = v;
      if (ok) {
        src->s[e * tiles_e + (mx_i64)nb * KB + kb] = (mx_u8)v;
        src->st[e * tiles_e + (mx_i64)kb * NB + nb] = (mx_u8)v;
      }
      if (v == 0xFFu) { atomicOr(p.status, MX_RES_NONFINITE); atomicOr(p.status_t, MX_RES_NONFINITE); }
    }
    __syncthreads();
    const mx_u32 sb = tile_s[ta][tb];
    const float inv = mx_inv_scale(sb);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint2 v = *reinterpret_cast<const uint2*>(xs + 2 * (i * 256 + t));
      const mx_u32 ch[4] = {v.x, v.y, 0u, 0u};
      // (computed for every word, then selected: a branch per word cost a convergence region)
      const mx_u32 x = mx_quant4<FMT>(mxq_elem<1>(ch, 0), mxq_elem<1>(ch, 1), mxq_elem<1>(ch, 2), mxq_elem<1>(ch, 3), inv, sb == 0xFFu);
      w[i] = word_ok ? x : 0u;
    }
    __syncthreads();   // the transposes below reuse the staging
  } else {
    if (t < 16) {
      const int a = t >> 2, b = t & 3, nb = (r0 >> 5) + a, kb = (c0 >> 5) + b;
      const bool ok = nb < NB && kb < KB;
      const mx_u32 v = ok ? p.s[e * tiles_e + (mx_i64)nb * KB + kb] : 0u;
      tile_s[a][b] = v;
      if (v == 0xFFu) { atomicOr(p.status, MX_RES_NONFINITE); atomicOr(p.status_t, MX_RES_NONFINITE); }
    }
    if (t < 128) { rowc[t] = 0; colc[t] = 0; }
    __syncthreads();
  }
  if (t < 16) {
    const int a = t >> 2, b = t & 3, nb = (r0 >> 5) + a, kb = (c0 >> 5) + b;
    if (nb < NB && kb < KB) {
      const mx_u32 sw = max(max(tile_s[a][0], tile_s[a][1]), max(tile_s[a][2], tile_s[a][3]));
      const mx_u32 st = max(max(tile_s[0][b], tile_s[1][b]), max(tile_s[2][b], tile_s[3][b]));
      p.s2[e * tiles_e + (mx_i64)nb * KB + kb] = (mx_u8)sw;
      p.st2[e * tiles_e + (mx_i64)kb * NB + nb] = (mx_u8)st;
    }
  }
  const mx_u32 sc = tile_s[ta][tb];
  const mx_u32 sw = max(max(tile_s[ta][0], tile_s[ta][1]), max(tile_s[ta][2], tile_s[ta][3]));
  const mx_u32 st = max(max(tile_s[0][tb], tile_s[1][tb]), max(tile_s[2][tb], tile_s[3][tb]));
  if constexpr (SRC == 0) {
#pragma unroll
    for (int i = 0; i < 16; ++i)
      w[i] = word_ok ? *reinterpret_cast<const mx_u32*>(p.q + (row0 + i) * C + c0 + 4 * lane) : 0u;
  }
  // Four rows at a time: the words of Wᵀ's copy live only until their transpose, so the kernel
  // holds 16 + 4 words (run 119: with all 32 live, 64 registers allowed 4 CTAs per SM and the
  // kernel moved 2.7 TB/s).
  // Each word takes both shifts' fast paths without a branch, and only a word with a byte off
  // them (rare: a miss needs one) takes the exact route and counts its misses: with a branch
  // per shift and per count this loop was ~46 instructions per word, and the kernel is bound by
  // issue (docs/perf.md run 187: 19 % slower at 18 % lower clocks). The row's address advances
  // by C per word instead of being recomputed.
  const mx_u32 dw = sw - sc, dt = st - sc;
  const mx_i64 o0 = row0 * C + c0 + 4 * lane;
  mx_u8* q2r = p.q2 + o0;
  mx_u8* bttr = (COPIES && !NOQ) ? p.btt + o0 : nullptr;
#pragma unroll
  for (int blk = 0; blk < 4; ++blk) {
    mx_u32 wt[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int i = 4 * blk + q;
      mx_u32 rw, rt;
      mx_u32 q2 = mx_fp8_shift4_fast<FMT>(w[i], dw, rw);
      wt[q] = mx_fp8_shift4_fast<FMT>(w[i], dt, rt);
      if (rw | rt) {
        mx_u32 mw, mt;
        q2 = mx_fp8_shift4<FMT>(w[i], dw, mw);
        wt[q] = mx_fp8_shift4<FMT>(w[i], dt, mt);
        if (mw) atomicAdd(&rowc[16 * warp + i], __popc(mw));
#pragma unroll
        for (int b = 0; b < 4; ++b)
          if ((mt >> b) & 1u) atomicAdd(&colc[4 * lane + b], 1);
      }
      if (word_ok) {
        *reinterpret_cast<mx_u32*>(q2r) = q2;
        if (COPIES && !NOQ) *reinterpret_cast<mx_u32*>(bttr) = w[i];
      }
      q2r += C;
      if (COPIES && !NOQ) bttr += C;
    }
    // ---- the two transposes ----
    if (COPIES) mx_t128_put(sm[0], warp, lane, blk, w[4 * blk], w[4 * blk + 1], w[4 * blk + 2], w[4 * blk + 3]);
    mx_t128_put(sm[T1], warp, lane, blk, wt[0], wt[1], wt[2], wt[3]);
  }
  __syncthreads();
  if constexpr (NOQ != 0) {
    // W's bytes, now that the counts are whole: only the row-stages its form cannot give back
    // (a row's stage here is its 128 columns of this block; sw is its stage scale)
    mx_u8* br = p.btt + o0;
#pragma unroll
    for (int i = 0; i < 16; ++i, br += C)
      if (word_ok && (rowc[16 * warp + i] != 0 || sw == 0xFFu)) *reinterpret_cast<mx_u32*>(br) = w[i];
  }
  const int j = t & 7;   // 16-byte chunk of a transposed row: block rows 16 j .. 16 j + 15
  const bool chunk_ok = r0 + 16 * j < R;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int c = (t >> 3) + 32 * k;
    const mx_i64 o = ((mx_i64)e * C + c0 + c) * R + r0 + 16 * j;
    // NOQ: Wᵀ's row c (this block's column c) only if its stage has a residual or a
    // non-finite scale (the stage scale of column tile k: the max down its four tiles)
    const bool keep_t = !NOQ || colc[c] != 0 ||
                        max(max(tile_s[0][k], tile_s[1][k]), max(tile_s[2][k], tile_s[3][k])) == 0xFFu;
#pragma unroll
    for (int m = COPIES ? 0 : 1; m < 2; ++m) {
      const uint4 v = mx_t128_get(sm[COPIES ? m : 0], c, j);
      if (chunk_ok && c0 + c < C && (m || keep_t)) *reinterpret_cast<uint4*>((m ? p.qt2 : p.bt) + o) = v;
    }
  }
  // ---- residual counts per row and stage (every row of the block, zeros included) ----
  if (t < 128) {
    if (r0 + t < R) p.mc[(mx_i64)blockIdx.x * gridDim.z * R + (mx_i64)e * R + r0 + t] = (mx_u8)rowc[t];
  } else {
    const int c = t - 128;
    if (c0 + c < C) p.mct[(mx_i64)blockIdx.y * gridDim.z * C + (mx_i64)e * C + c0 + c] = (mx_u8)colc[c];
  }
}

// The residual lists of one copy from its per-stage counts (mx_reencode_pair's mc or mct). A CTA
// of 256 threads owns 8 rpw rows (rpw = rows per warp: 1, 2, 4, 8 or 16; the host picks the
// fewest that keep the grid in one wave, launch_lists in src/backend/cuda/chain_form.rs). First
// every row's total: thread (phase f, row i) sums stages f, f + nf, ... of row i (nf = 32 / rpw
// phases), a batch of 8 independent loads at a time, so a warp's load is 32 / rpw pieces of
// rpw bytes (runs 120-121: a warp per row read its counts from as many sectors as stages, and
// a lane per row with one load in flight left 32 dependent loads per warp; both took 15-23 us on
// shape a). Then the CTA's threads write the count of every row without residuals (zero) in
// one coalesced store, and warp w lists rows w, w + 8, ... that have them: their stages with
// residuals (in order; with rpw 1 and at most 32 stages their counts are the ones in shared
// memory) are read again, 4 bytes per lane, and listed as mx_reencode_rows lists them (same
// records, same order, same overflow rule and status words).
// Why rpw: with a warp per row (rpw 1) W's lists on shape c (E C = 92160 rows) took 11 waves of
// short CTAs, 26 us each (run 136), while X's 32768 rows took ~9 us in 4 waves; 4 rows per warp
// for X on a was no faster (8.3 us, run 122): the time is the waves' latency, not the work.
// Which warp lists which row: the rows with a list go into a queue in shared memory, and warp w
// takes entries w, w + 8, ...; so a warp lists at most one row more than another of its CTA.
// With rows w, w + 8, ... per warp a CTA waited for the warp that drew the most rows with
// residuals (W on c: 16 rows per warp, ~1 in 8 with residuals, and each listed row is two or
// three dependent global loads): the queue made c's W lists 35 % faster (run 185).
struct MxChainListParams {
  const mx_u8* q; const mx_u8* s; const mx_u8* mc;   // mc[j * R + r]: row r's residuals in stage j
  MxRes* res; int* cnt; int* status;
  mx_i64 R; mx_i64 ise, isr, isc;                    // as MxReencodeParams
  int K, rpe, rdv, slots;
  int rpw, pad;                                      // rows per warp (a power of two <= 16)
};

// Row r's residual list (a full warp; the row has residuals): its stages with residuals, in
// order, re-read 4 bytes per lane. Returns the number listed.
// `first`: stage `lane`'s count when `have_first` (the caller has it in shared memory: rpw 1 and
// ns <= 32), which saves re-reading the counts.
template <int FMT>
MX_DEV int mx_chain_list_row(const MxChainListParams& p, mx_i64 r, int ns, bool have_first, int first) {
  const int lane = threadIdx.x & 31;
  const mx_i64 e = r / p.rpe;
  const int n = (int)(r - e * p.rpe);
  const mx_i64 sb = e * p.ise + (mx_i64)(n / p.rdv) * p.isc;
  const mx_u8* qr = p.q + r * p.K;
  MxRes* rr = p.res + r * p.slots;
  int run = 0;
  for (int j0 = 0; j0 < ns; j0 += 32) {
    const bool has = j0 + lane < ns && (have_first ? first : p.mc[(mx_i64)(j0 + lane) * p.R + r]) != 0;
    mx_u32 todo = __ballot_sync(0xffffffffu, has);
    for (; todo; todo &= todo - 1) {
      const int k = 128 * (j0 + __ffs((int)todo) - 1) + 4 * lane;
      const bool valid = k < p.K;
      const mx_u32 sc = valid ? p.s[sb + (k >> 5) * p.isr] : 0u;
      mx_u32 S = sc;
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 8));
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 16));
      const mx_u32 x = valid ? *reinterpret_cast<const mx_u32*>(qr + k) : 0u;
      mx_u32 miss;
      mx_fp8_shift4<FMT>(x, S - sc, miss);
      const int nm = __popc(miss);
      const int incl = warp_incl_scan(nm);
      int slot = run + incl - nm;
      if (nm) {
        const float scale = mx_e8m0_to_f32(sc);
        for (mx_u32 m = miss; m; m &= m - 1) {
          const int i = __ffs((int)m) - 1;
          rr[slot++] = MxRes{k + i, mx_fp8_value<FMT>((x >> (8 * i)) & 0xFFu) * scale};
        }
      }
      run += __shfl_sync(0xffffffffu, incl, 31);
    }
  }
  return run;
}

template <int FMT>
MX_DEV void mx_chain_lists(const MxChainListParams& p) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int ns = (p.K + 127) >> 7;
  const int lg = __ffs(p.rpw) + 2;          // log2 of the CTA's rows (8 rpw)
  const int rc = 1 << lg, nf = 256 >> lg;   // rows, phases
  const mx_i64 r0 = (mx_i64)blockIdx.x * rc;
  __shared__ int part[256];   // part[f rc + i]: phase f's sum for row i
  __shared__ int listed, queued;
  __shared__ int queue[128];  // the CTA's rows with a list (rc <= 128)
  {
    const int i = t & (rc - 1), f = t >> lg;
    int sum = 0;
    if (r0 + i < p.R) {
      const mx_u8* col = p.mc + r0 + i;
      for (int j0 = f; j0 < ns; j0 += 8 * nf) {
        int v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = j0 + u * nf < ns ? col[(mx_i64)(j0 + u * nf) * p.R] : 0;
#pragma unroll
        for (int u = 0; u < 8; ++u) sum += v[u];
      }
    }
    part[t] = sum;   // t == f rc + i
  }
  if (t == 0) { listed = 0; queued = 0; }
  __syncthreads();
  // totals; rows without a list (none, or more residuals than slots) get their count here, the
  // others go into the queue
  if (t < rc) {
    int total = 0;
    for (int f = 0; f < nf; ++f) total += part[(f << lg) + t];
    const mx_i64 r = r0 + t;
    if (r < p.R) {
      if (total > 0 && total <= p.slots) {
        queue[atomicAdd(&queued, 1)] = t;
      } else {
        p.cnt[r] = 0;
        if (total > p.slots) atomicOr(p.status, MX_RES_OVERFLOW);
      }
    }
  }
  const bool have_first = nf == 32 && ns <= 32;
  __syncthreads();
  for (int q = warp; q < queued; q += 8) {
    const int i = queue[q];
    const mx_i64 r = r0 + i;
    const int mine = lane < nf ? part[(lane << lg) + i] : 0;   // stage `lane`'s count when have_first
    const int run = mx_chain_list_row<FMT>(p, r, ns, have_first, mine);
    if (lane == 0) {
      p.cnt[r] = run;
      atomicAdd(&listed, run);
    }
  }
  __syncthreads();
  if (t == 0 && listed) atomicAdd(p.status + 1, listed);
}
