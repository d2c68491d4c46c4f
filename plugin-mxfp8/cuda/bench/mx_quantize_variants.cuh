// mx_quantize_variants.cuh — HARNESS ONLY (bench/launch.cu, included after ../mx_quantize.cu):
// the quantizer variants that lost an A/B and are kept to re-run it; each block is behind the
// macro launch.cu defines for it. The backend never compiles this file.
#pragma once

#ifdef MXQ_INSTANTIATE_SYNC  // bench/launch.cu (A/B): variant 11 mx_quantize_t32_* at 5 CTAs/SM
// (<= 48 registers), 7 the tiled kernel with the register prefetch only, 8 its 2-slot ring
extern "C" __global__ void __launch_bounds__(256, 5) mx_quantize_t32o_bf16_e4m3(const __grid_constant__ MxQuantTmaParams p) {
  mx_quant_tile32<0, MXQ_ASYNC_STAGES>(p);
}
// 19: mx_quantize_t32l_* without the W^T stores (LT = 2, timing diagnostic, wrong W^T).
extern "C" __global__ void __launch_bounds__(256, 4) mx_quantize_t32n_bf16_e4m3(const __grid_constant__ MxQuantTmaParams p) {
  mx_quant_tile32<0, MXQ_ASYNC_STAGES, 2>(p);
}
MXQ_INST(mx_quantize_bf16_e4m3_sync, 1, 0, 0)
MXQ_INST(mx_quantize_bf16_e5m2_sync, 1, 1, 0)
MXQ_INST(mx_quantize_bf16_e4m3_as2, 1, 0, 2)
MXQ_INST(mx_quantize_bf16_e5m2_as2, 1, 1, 2)
#endif

// Harness A/B (MXQF_INSTANTIATE_VARIANTS, variant 17, bf16 input only): the flat kernel with
// each thread owning two adjacent chunks (32 input bytes, one 16-byte store of FP8 bytes)
// instead of one (an 8-byte store), as a copy kernel stores; a block is two lanes.
template <int FMT, int U>
MX_DEV void mx_quant_flat_pairs(const MxQuantFlatParams& p) {
  const mx_i64 npairs = p.nblocks * 2;  // bf16: 4 chunks = 2 pairs per block
  const mx_i64 stride = (mx_i64)gridDim.x * blockDim.x;
  const int lane = threadIdx.x & 31;
  const uint4* in = reinterpret_cast<const uint4*>(p.in);
  for (mx_i64 c0 = (mx_i64)blockIdx.x * blockDim.x + threadIdx.x; c0 - lane < npairs; c0 += U * stride) {
    mx_u32 raw[U][2][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const mx_i64 c = c0 + u * stride;
      mxqf_set(raw[u][0], mxqf_load1<0>(in, 2 * c, 2 * npairs));
      mxqf_set(raw[u][1], mxqf_load1<0>(in, 2 * c + 1, 2 * npairs));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const mx_i64 c = c0 + u * stride;
      mx_u32 am = max(mxq_chunk_amax<1>(raw[u][0]), mxq_chunk_amax<1>(raw[u][1]));
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
      if (c >= npairs) continue;
      const mx_u32 sb = mx_scale_byte<FMT, true>(am, p.mode);
      mx_u32 q0[2], q1[2];
      mxq_quant_chunk<1, FMT>(raw[u][0], sb, q0);
      mxq_quant_chunk<1, FMT>(raw[u][1], sb, q1);
      *reinterpret_cast<uint4*>(p.q + 16 * c) = make_uint4(q0[0], q0[1], q1[0], q1[1]);
      if ((lane & 1) == 0) p.s[c / 2] = (mx_u8)sb;
    }
  }
}

// ============================================================================================
// The flat 1x32 quantizer fed by bulk copies (mx_quantize_rows_bulk_*, mx_fakequant_rows_bulk_*;
// sm_90): the same blocks, the same per-chunk code (mxqf_chunk) and the same bytes out as
// mx_quantize_rows_* / mx_fakequant_rows_*; only how the input reaches the threads differs.
// Why it was tried: under the timing protocol's L2 flush (do_bench zeroes 256 MB before every
// call, which leaves the L2 full of dirty lines) the LDG-fed kernel took 7-11 µs longer on a
// 203 MB tensor than after a read-only flush, a copy of the same bytes 3 µs, and the 32x32
// quantizer, whose input comes by TMA, 3 µs (docs/perf.md run 59). It did not help: 2-8 %
// slower than the LDG-fed kernel under every flush (run 60), so it stays in the harness.
// Layout: the input is cut into slabs of MXQB_SLAB bytes (the last one shorter); CTA i takes
// slabs i, i + G, ... (G = grid size). A ring of AS slots in static shared memory, one bulk
// copy per slab, per slot a full mbarrier (transaction bytes) and an empty one (one arrival
// per warp once it has read its chunks); thread 0 refills the slot read in the previous
// iteration, so AS - 1 slabs are in flight while one is computed. Thread t takes chunks t and
// t + 256 of its slab (a warp reads 512 contiguous bytes of shared memory: no bank conflict).
// Requires: in 16-byte aligned (bulk copies), q as mx_quantize_rows_*.
// Launch: block 256, any grid x >= 1 (host rule: the fewest slab rounds that at most
// MXQB_CTAS_PER_SM CTAs per SM allow, then the fewest CTAs that do them; a round = one slab).
// ============================================================================================
#define MXQB_SLAB 8192
#define MXQB_AS 4
#ifndef MXQB_CTAS_PER_SM
#define MXQB_CTAS_PER_SM 4
#endif
template <int IN_BF16, int FMT, int AS, int FAKE>
MX_DEV void mx_quant_flat_bulk(const MxQuantFlatParams& p) {
  constexpr int CPB = IN_BF16 ? 4 : 8;  // chunks per block
  constexpr int CPS = MXQB_SLAB / 16;   // chunks per slab
  constexpr int U = CPS / 256;          // chunks per thread per slab
  __shared__ __align__(128) uint4 slots[AS][CPS];
  __shared__ __align__(8) mx_u64 full[AS], empty[AS];
  const mx_i64 nchunks = p.nblocks * CPB;
  const mx_i64 nslabs = (nchunks + CPS - 1) / CPS;
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) {
    for (int s = 0; s < AS; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], 8); }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const mx_u8* in = reinterpret_cast<const mx_u8*>(p.in);
  const mx_i64 G = gridDim.x;
  auto issue = [&](mx_i64 slab, int s) {
    const mx_i64 c0 = slab * CPS;
    const mx_u32 bytes = (mx_u32)(min((mx_i64)CPS, nchunks - c0) * 16);
    mbar_arrive_expect_tx(&full[s], bytes);
    bulk_load(smem_u32(&slots[s][0]), in + c0 * 16, bytes, &full[s]);
  };
  mx_i64 slab = blockIdx.x;
  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < AS; ++i)
      if (slab + i * G < nslabs) issue(slab + i * G, i);
  }
  for (int i = 0; slab < nslabs; ++i, slab += G) {
    const int s = i % AS;
    if (tid == 0 && i > 0) {
      const mx_i64 next = slab + (AS - 1) * G;  // the slab of iteration i - 1 + AS
      if (next < nslabs) {
        const int sp = (i - 1) % AS;
        mbar_wait(&empty[sp], ((i - 1) / AS) & 1);
        fence_proxy_async_smem();  // the slot's generic reads come before the async write
        issue(next, sp);
      }
    }
    mbar_wait(&full[s], (i / AS) & 1);
    const mx_i64 c0 = slab * CPS;
    mx_u32 raw[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (c0 + u * 256 + tid < nchunks) v = slots[s][u * 256 + tid];
      mxqf_set(raw[u], v);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
#pragma unroll
    for (int u = 0; u < U; ++u) mxqf_chunk<IN_BF16, FMT, 0, FAKE>(p, raw[u], c0 + u * 256 + tid, nchunks, lane);
  }
}

// The bulk-copy-fed flat kernels (mx_quant_flat_bulk), HARNESS ONLY: 2-8 % slower than the
// LDG-fed ones under both flushes on every anchor shape (docs/perf.md run 60).
#define MXQB_INST(NAME, BF, F, AS, FAKE) \
  extern "C" __global__ void __launch_bounds__(256, MXQB_CTAS_PER_SM) NAME(const MxQuantFlatParams p) { mx_quant_flat_bulk<BF, F, AS, FAKE>(p); }
#if defined(MXQF_INSTANTIATE_VARIANTS) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900)
MXQB_INST(mx_quantize_rows_bulk_f32_e4m3, 0, 0, MXQB_AS, 0)
MXQB_INST(mx_quantize_rows_bulk_bf16_e4m3, 1, 0, MXQB_AS, 0)
MXQB_INST(mx_quantize_rows_bulk_f32_e5m2, 0, 1, MXQB_AS, 0)
MXQB_INST(mx_quantize_rows_bulk_bf16_e5m2, 1, 1, MXQB_AS, 0)
MXQB_INST(mx_fakequant_rows_bulk_f32_e4m3, 0, 0, MXQB_AS, 1)
MXQB_INST(mx_fakequant_rows_bulk_bf16_e4m3, 1, 0, MXQB_AS, 1)
MXQB_INST(mx_fakequant_rows_bulk_f32_e5m2, 0, 1, MXQB_AS, 1)
MXQB_INST(mx_fakequant_rows_bulk_bf16_e5m2, 1, 1, MXQB_AS, 1)
// ring depth 3 and 5
MXQB_INST(mx_quantize_rows_bulk3_bf16_e4m3, 1, 0, 3, 0)
MXQB_INST(mx_quantize_rows_bulk5_bf16_e4m3, 1, 0, 5, 0)
MXQB_INST(mx_quantize_rows_bulk3_f32_e4m3, 0, 0, 3, 0)
MXQB_INST(mx_quantize_rows_bulk5_f32_e4m3, 0, 0, 5, 0)
#endif
#ifdef MXQF_INSTANTIATE_VARIANTS  // harness A/B only (bench/launch.cu)
MXQF_INST(mx_quantize_rows_u8_bf16_e4m3, 1, 0, 8, 0, 0)
MXQF_INST(mx_quantize_rows_u8_f32_e4m3, 0, 0, 8, 0, 0)
MXQF_INST(mx_quantize_rows_cs_bf16_e4m3, 1, 0, MXQF_U, 1, 0)
MXQF_INST(mx_quantize_rows_cs_f32_e4m3, 0, 0, MXQF_U, 1, 0)
MXQF_INST(mx_quantize_rows_u8cs_bf16_e4m3, 1, 0, 8, 1, 0)
MXQF_INST(mx_quantize_rows_u8cs_f32_e4m3, 0, 0, 8, 1, 0)
MXQF_INST(mx_quantize_rows_pf_bf16_e4m3, 1, 0, MXQF_U, 0, 1)
MXQF_INST(mx_quantize_rows_pf_f32_e4m3, 0, 0, MXQF_U, 0, 1)
// variant 15 (diagnostic, no scale bytes stored), 16 (plain ld.global), 17 (chunk pairs)
extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) mx_quantize_rows_nosc_bf16_e4m3(const MxQuantFlatParams p) { mx_quant_flat<1, 0, MXQF_U, 0, 0, 0, 1>(p); }
extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) mx_quantize_rows_nosc_f32_e4m3(const MxQuantFlatParams p) { mx_quant_flat<0, 0, MXQF_U, 0, 0, 0, 1>(p); }
MXQF_INST(mx_quantize_rows_plain_bf16_e4m3, 1, 0, MXQF_U, 2, 0)
MXQF_INST(mx_quantize_rows_plain_f32_e4m3, 0, 0, MXQF_U, 2, 0)
extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) mx_quantize_rows_pairs_bf16_e4m3(const MxQuantFlatParams p) { mx_quant_flat_pairs<0, 2>(p); }
#endif

// ============================================================================================
// Warp-per-block 32x32 quantizer (TILE, optionally with TILE_T), R % 32 == 0 and C % 32 == 0:
// same bytes as mx_quantize_* with MXQ_TILE | MXQ_TILE_T (same helpers).
// HARNESS ONLY (MXQT_INSTANTIATE, bench/launch.cu): it measured 56-66 % of copy against the
// tiled kernel's 76-78 % (run 30), so the backend keeps the tiled kernel for 32x32. Each warp owns
// whole 32x32 blocks (grid-stride over blocks, column block fastest), so no CTA barrier:
// each 16-byte load of the warp covers whole block rows (8 bf16 / 4 f32 rows), the block
// amax is 5 xor-shuffles, the quantized bytes go to qa in full 32-byte sectors and to the
// warp's own 1 KB of shared memory (32 rows x 9 words), from which two PRMT 4x4 transposes
// per lane give full 32-byte sectors of qt. (Lane = row, 16 bytes of 32 rows per load,
// measured 45-52 % of copy, run 29: L2-bound on half-used sectors.)
// Why: the tiled kernel's 32x32 path (3 CTA barriers per tile, half the threads idle in the
// transposed store) ran at 75-81 % of copy (runs 9, 27, 28); ncu (run 28): DRAM 55 %,
// warps issuing every 11 cycles.
// Layouts per batch b (batch = nblocks / (R/32 * C/32)): qa [R][C], sa [R/32][C/32],
// qt [C][R], st [C/32][R/32] (qt / st may be null). Launch: block 256, any grid x >= 1
// (host rule: at most MXQT_CTAS_PER_SM (bf16) / MXQT_CTAS_PER_SM_F32 CTAs per SM, all
// resident).
// ============================================================================================
#ifdef MXQT_INSTANTIATE
#ifndef MXQT_CTAS_PER_SM
#define MXQT_CTAS_PER_SM 4      // bf16 input (64 registers)
#endif
#define MXQT_CTAS_PER_SM_F32 3  // f32 input: 32 registers of raw input per thread (80)
struct MxQuantTilesParams {
  const void* in;   // [batch][R][C] f32 or bf16
  mx_u8* qa; mx_u8* sa; mx_u8* qt; mx_u8* st;
  mx_i64 nblocks;   // batch * (R/32) * (C/32)
  int R, C, mode, pad_;
};

template <int IN_BF16, int FMT>
MX_DEV void mx_quant_tiles(const MxQuantTilesParams& p) {
  __shared__ mx_u32 tsm[8][32 * 9];
  constexpr int NCH = IN_BF16 ? 4 : 8;  // 16-byte chunks per block row
  constexpr int QW = MxqG<IN_BF16>::QW;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int RB = p.R >> 5, CB = p.C >> 5;
  const mx_i64 nwarps = (mx_i64)gridDim.x * (blockDim.x >> 5);
  mx_u32* tw = tsm[w];
  for (mx_i64 blk = (mx_i64)blockIdx.x * (blockDim.x >> 5) + w; blk < p.nblocks; blk += nwarps) {
    const int cb = (int)(blk % CB);
    const mx_i64 t = blk / CB;
    const int rb = (int)(t % RB);
    const mx_i64 b = t / RB;
    // chunk j = 32k + lane (k < NCH) of the block's 32 * NCH 16-byte chunks: row j / NCH,
    // chunk j % NCH of that row, so one load covers 32 / NCH whole 64-byte (bf16) or
    // 128-byte (f32) block rows and every sector is used in full.
    const mx_i64 row0 = b * p.R + rb * 32;  // first row of the block in [batch * R]
    const int cr = lane % NCH;
    mx_u32 raw[NCH][4];
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const mx_i64 off = (row0 + (32 * k + lane) / NCH) * p.C + cb * 32;
      const uint4* src = IN_BF16 ? reinterpret_cast<const uint4*>(reinterpret_cast<const mx_u16*>(p.in) + off)
                                 : reinterpret_cast<const uint4*>(reinterpret_cast<const float*>(p.in) + off);
      const uint4 v = __ldg(src + cr);
      raw[k][0] = v.x; raw[k][1] = v.y; raw[k][2] = v.z; raw[k][3] = v.w;
    }
    mx_u32 am = 0;
#pragma unroll
    for (int k = 0; k < NCH; ++k) am = max(am, mxq_chunk_amax<IN_BF16>(raw[k]));
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) am = max(am, __shfl_xor_sync(0xffffffffu, am, o));
    const mx_u32 sb = mx_scale_byte<FMT, true>(am, p.mode);
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const int r = (32 * k + lane) / NCH;
      mx_u32 q[QW];
      mxq_quant_chunk<IN_BF16, FMT>(raw[k], sb, q);
      mx_u8* dst = p.qa + (row0 + r) * p.C + cb * 32 + 4 * QW * cr;
      if (IN_BF16) *reinterpret_cast<uint2*>(dst) = make_uint2(q[0], q[QW - 1]);
      else *reinterpret_cast<mx_u32*>(dst) = q[0];
#pragma unroll
      for (int i = 0; i < QW; ++i) tw[r * 9 + QW * cr + i] = q[i];
    }
    if (lane == 0) p.sa[(b * RB + rb) * CB + cb] = (mx_u8)sb;
    if (p.qt != nullptr) {  // uniform
      __syncwarp();
      // lane (cw, h): columns 4cw..4cw+3, rows 8h..8h+7 of the block
      const int cw = lane & 7, h = lane >> 3;
      mx_u32 o[4][2];
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        const int rr = 8 * h + 4 * g;
        mxq_transpose4x4(tw[rr * 9 + cw], tw[(rr + 1) * 9 + cw], tw[(rr + 2) * 9 + cw], tw[(rr + 3) * 9 + cw],
                         o[0][g], o[1][g], o[2][g], o[3][g]);
      }
      __syncwarp();  // the next block rewrites tw
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const mx_i64 col = b * p.C + cb * 32 + 4 * cw + m;  // row of [batch * C]
        *reinterpret_cast<uint2*>(p.qt + col * p.R + rb * 32 + 8 * h) = make_uint2(o[m][0], o[m][1]);
      }
      if (lane == 0 && p.st != nullptr) p.st[(b * CB + cb) * RB + rb] = (mx_u8)sb;
    }
  }
}

#define MXQT_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256, (BF) ? MXQT_CTAS_PER_SM : MXQT_CTAS_PER_SM_F32) \
      NAME(const MxQuantTilesParams p) { mx_quant_tiles<BF, F>(p); }
MXQT_INST(mx_quantize_tiles_f32_e4m3, 0, 0)
MXQT_INST(mx_quantize_tiles_bf16_e4m3, 1, 0)
MXQT_INST(mx_quantize_tiles_f32_e5m2, 0, 1)
MXQT_INST(mx_quantize_tiles_bf16_e5m2, 1, 1)
#endif  // MXQT_INSTANTIATE

#ifdef MXQ_INSTANTIATE_LEGACY
// The run-7 kernel (one tile per CTA, f32 tile in shared memory), for A/B timing and
// bit-for-bit comparison in bench/ only. Launch: grid y = T exactly.
#define XS(r, c) xs_[(r) * 141 + (c) + 4 * ((c) >> 5)]

// One CTA = 256 threads = a tile of 32 rows x 128 columns.
// grid: x = ceil(C/128), y = row tiles (see README), z = batch.
template <int IN_BF16, int FMT>
MX_DEV void mx_quant_tile_legacy(const MxQuantParams& p) {
  // 32 x 128 tile, row stride 141 words and +4 words per 32-column block: the row pass
  // (8 threads per row, one per 16-column half block), the column pass and the fill are
  // bank-conflict free except the fill (2-way); with the old [32][129] the row pass and
  // the fill were 4-way conflicted.
  __shared__ float xs_[32 * 141];
  __shared__ mx_u32 tile_amax[8][4];
  __shared__ int g_start[MX_MAX_E + 1], g_pre[MX_MAX_E + 1];
  const int t = threadIdx.x;
  const int c0 = blockIdx.x * 128;
  const int ty = blockIdx.y;
  const int b = blockIdx.z;

  // ---- map the row tile ----
  int src0, nvalid, p0;         // first source row, valid rows, padded (transposed) row
  bool cols_ok = true;
  if (p.offs != nullptr) {
    if (t < 32) warp_group_tables(p.offs, p.E, 128, 128, g_start, g_pre);
    __syncthreads();
    if (ty < p.grouped_tiles) {
      p0 = ty * 32;
      int e = upper_idx(g_pre, p.E, p0);
      int local = p0 - g_pre[e];
      int m = g_start[e + 1] - g_start[e];
      src0 = g_start[e] + local;
      nvalid = min(max(m - local, 0), 32);
    } else {  // rows after offs[E-1]: row-wise outputs only
      src0 = g_start[p.E] + (ty - p.grouped_tiles) * 32;
      nvalid = min(32, p.R - src0);
      p0 = 0;
      cols_ok = false;
    }
  } else {
    src0 = ty * 32; p0 = src0;
    nvalid = min(32, p.R - src0);
  }
  if (nvalid < 0) nvalid = 0;

  const void* base = IN_BF16 ? (const void*)(reinterpret_cast<const mx_u16*>(p.in) + b * p.in_bs)
                             : (const void*)(reinterpret_cast<const float*>(p.in) + b * p.in_bs);
  // ---- load 32 x 128 into smem (zeros outside) ----
#pragma unroll
  for (int it = 0; it < 2; ++it) {
    int id = t + it * 256;
    int r = id >> 4, c8 = (id & 15) * 8;
    float v[8];
    load8<IN_BF16>(p, base, src0 + r, c0 + c8, r < nvalid, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) XS(r, c8 + i) = v[i];
  }
  __syncthreads();

  const int CB = (p.C + 31) >> 5;
  const int flags = p.flags;

  // ---- along C: ROWS (1x32) or TILE (32x32); thread = (row, 32-col block, half) ----
  if (flags & (MXQ_ROWS | MXQ_TILE)) {
    const int row = t >> 3, cb = (t >> 1) & 3, h = t & 1;
    const int cc = cb * 32 + h * 16;
    mx_u32 am = 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) am = max(am, abs_bits(XS(row, cc + i)));
    am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
    if (flags & MXQ_TILE) {
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 8));
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 16));
      if ((t & 31) < 8 && (t & 1) == 0) tile_amax[t >> 5][cb] = am;
      __syncthreads();
      am = 0;
#pragma unroll
      for (int w = 0; w < 8; ++w) am = max(am, tile_amax[w][cb]);
    }
    const mx_u32 sb = mx_scale_byte<FMT>(am, p.mode);
    const float inv = mx_inv_scale(sb);
    const bool nf = sb == 0xFFu;
    mx_u32 w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      w[q] = mx_quant4<FMT>(XS(row, cc + 4*q), XS(row, cc + 4*q + 1), XS(row, cc + 4*q + 2), XS(row, cc + 4*q + 3), inv, nf);
    const int gcol = c0 + cc;
    if (row < nvalid && gcol < p.C) {
      mx_u8* dst = p.qa + b * p.qa_bs + (mx_i64)(src0 + row) * p.C + gcol;
      store16(dst, w, p.C - gcol, (p.C & 15) == 0);
    }
    const int gcb = (c0 >> 5) + cb;
    if (h == 0 && gcb < CB) {
      if (flags & MXQ_ROWS) {
        if (row < nvalid) p.sa[b * p.sa_bs + (mx_i64)(src0 + row) * CB + gcb] = (mx_u8)sb;
      } else if (row == 0 && nvalid > 0) {
        p.sa[b * p.sa_bs + (mx_i64)(src0 >> 5) * CB + gcb] = (mx_u8)sb;
      }
    }
  }

  // ---- along R, written transposed: COLS (32x1) or TILE_T; thread = (column, half) ----
  if ((flags & (MXQ_COLS | MXQ_TILE_T)) && cols_ok) {
    const int col = t >> 1, h = t & 1;
    const int gcol = c0 + col;
    mx_u32 am;
    if (flags & MXQ_TILE_T) {
      if (!(flags & MXQ_TILE)) {  // tile amax not computed above
        const int row = t >> 3, cb = (t >> 1) & 3, hh = t & 1;
        mx_u32 a2 = 0;
#pragma unroll
        for (int i = 0; i < 16; ++i) a2 = max(a2, abs_bits(XS(row, cb * 32 + hh * 16 + i)));
        a2 = max(a2, __shfl_xor_sync(0xffffffffu, a2, 1));
        a2 = max(a2, __shfl_xor_sync(0xffffffffu, a2, 8));
        a2 = max(a2, __shfl_xor_sync(0xffffffffu, a2, 16));
        if ((t & 31) < 8 && (t & 1) == 0) tile_amax[t >> 5][cb] = a2;
      }
      __syncthreads();
      am = 0;
#pragma unroll
      for (int w = 0; w < 8; ++w) am = max(am, tile_amax[w][col >> 5]);
    } else {
      am = 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) am = max(am, abs_bits(XS(h * 16 + i, col)));
      am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
    }
    const mx_u32 sb = mx_scale_byte<FMT>(am, p.mode);
    const float inv = mx_inv_scale(sb);
    const bool nf = sb == 0xFFu;
    mx_u32 w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      w[q] = mx_quant4<FMT>(XS(h*16 + 4*q, col), XS(h*16 + 4*q + 1, col), XS(h*16 + 4*q + 2, col), XS(h*16 + 4*q + 3, col), inv, nf);
    if (gcol < p.C) {
      // grouped/COLS: the whole 32-row padded block is written (zeros past nvalid);
      // ungrouped: rows up to min(32, R - p0).
      int lim = p.offs != nullptr ? 32 : nvalid;
      int nv = lim - h * 16;
      if (nv > 0) {
        mx_u8* dst = p.qt + b * p.qt_bs + (mx_i64)gcol * p.ldt + p0 + h * 16;
        store16(dst, w, nv, (p.ldt & 15) == 0);
      }
      if (h == 0 && p.st != nullptr) {
        if (flags & MXQ_TILE_T) {
          if ((col & 31) == 0) p.st[b * p.st_bs + (mx_i64)(gcol >> 5) * p.ldst + (p0 >> 5)] = (mx_u8)sb;
        } else {
          p.st[b * p.st_bs + (mx_i64)gcol * p.ldst + (p0 >> 5)] = (mx_u8)sb;
        }
      }
    }
  }
}

#define MXQ_INST_LEGACY(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256) NAME(const MxQuantParams p) { mx_quant_tile_legacy<BF, F>(p); }
MXQ_INST_LEGACY(mx_quantize_f32_e4m3_legacy, 0, 0)
MXQ_INST_LEGACY(mx_quantize_bf16_e4m3_legacy, 1, 0)
MXQ_INST_LEGACY(mx_quantize_f32_e5m2_legacy, 0, 1)
MXQ_INST_LEGACY(mx_quantize_bf16_e5m2_legacy, 1, 1)
#undef XS

#endif  // MXQ_INSTANTIATE_LEGACY
