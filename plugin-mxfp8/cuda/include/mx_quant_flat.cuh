// mx_quant_flat.cuh — the flat 1x32 quantizer (mx_quantize_rows_*, mx_fakequant_rows_*,
// mx_quantize_rows_vals_*): ROWS with C % 32 == 0 as one contiguous run of blocks.
// Requires mx_quant_blocks.cuh and mx_quant_values.cuh. NVRTC-clean.
#pragma once

// ============================================================================================
// Flat 1x32 quantizer (ROWS only, C % 32 == 0): the row-major input is then one contiguous
// run of 32-element blocks, block b = elements 32b .. 32b+31 and scale byte b, so rows
// and columns do not matter. Same bytes as mx_quantize_* with MXQ_ROWS (same helpers).
// Why a second kernel: the tiled one reads 256 contiguous bytes per row per CTA (bf16)
// and holds 32 bytes per thread in flight; it ran at 77-85 % of copy bandwidth (docs/
// perf.md runs 9, 15). Here a warp reads 512 contiguous bytes per load and every thread
// has MXQF_U 16-byte loads in flight (64 bytes), as the fake quantizer (86-95 %) does.
// Thread layout: 16-byte chunk c (bf16: 8 elements, 4 chunks per block; f32: 4 elements,
// 8 per block) goes to global thread c % (grid threads); a thread takes its MXQF_U chunks
// c, c + S, ..., c + (MXQF_U-1)S (S = grid threads, a multiple of 32) in one round, then
// advances by MXQF_U * S. The lanes of one block are consecutive and aligned, so a block is
// wholly inside or outside the tensor and its amax is 2 (bf16) or 3 (f32) xor-shuffles.
// Requires: in 16-byte aligned, q 8-byte (bf16) / 4-byte (f32) aligned. nblocks = R*C/32.
// Launch: block 256, any grid x >= 1 (host rule: the fewest grid-stride rounds that at most
// MXQF_CTAS_PER_SM CTAs per SM allow, then the fewest CTAs that do them; quant_flat_grid in
// src/backend/cuda/quantize.rs, mx_quant_flat_grid in bench/launch.cu).
// ============================================================================================
#define MXQF_U 4
#ifndef MXQF_CTAS_PER_SM
#define MXQF_CTAS_PER_SM 4
#endif
struct MxQuantFlatParams {
  const void* in;   // nblocks * 32 elements, f32 or bf16
  mx_u8* q;         // nblocks * 32 bytes
  mx_u8* s;         // nblocks scale bytes
  mx_i64 nblocks;
  int mode;
};
static_assert(sizeof(MxQuantFlatParams) == 40, "QuantFlatParams in src/backend/cuda/params.rs hard-codes 40 bytes");

// U: 16-byte loads in flight per thread; CS: streaming cache hints (ld.global.cs /
// st.global.cs: evict-first in L2) instead of the read-only path and plain stores;
// PF (harness A/B): the next round's loads are issued before this round is computed.
// CS: 0 = read-only path (ld.global.nc), 1 = streaming (ld.global.cs), 2 = plain ld.global
// (harness A/B).
template <int CS> MX_DEV uint4 mxqf_load1(const uint4* in, mx_i64 c, mx_i64 nchunks) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (c < nchunks) v = CS == 1 ? __ldcs(in + c) : CS == 2 ? in[c] : __ldg(in + c);
  return v;
}
MX_DEV void mxqf_set(mx_u32 (&w)[4], uint4 v) { w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w; }

// One 16-byte chunk c of the flat layout: the block amax by xor-shuffles (every lane of
// the warp must call this: the lanes of a block are consecutive and aligned), then, for
// c < nchunks, the chunk's FP8 bytes at p.q (FAKE: its MX values as bf16) and, from the
// block's first lane, the scale byte. Shared by the LDG-fed and the bulk-copy-fed kernels.
// FAKE 2: both, the FP8 bytes and scale at p.q / p.s and the MX values as bf16 at vals.
// NOSC (harness diagnostic, wrong output): the scale bytes are not stored.
template <int IN_BF16, int FMT, int CS, int FAKE, int NOSC = 0>
MX_DEV void mxqf_chunk(const MxQuantFlatParams& p, const mx_u32 (&raw)[4], mx_i64 c, mx_i64 nchunks, int lane,
                       mx_u16* vals = nullptr) {
  constexpr int CPB = IN_BF16 ? 4 : 8;  // chunks per block
  constexpr int QW = MxqG<IN_BF16>::QW;
  mx_u32 am = mxq_chunk_amax<IN_BF16>(raw);
  am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
  am = max(am, __shfl_xor_sync(0xffffffffu, am, 2));
  if (!IN_BF16) am = max(am, __shfl_xor_sync(0xffffffffu, am, 4));
  if (c >= nchunks) return;
  const mx_u32 sb = mx_scale_byte<FMT, true>(am, p.mode);
  mx_u32 q[QW];
  mxq_quant_chunk<IN_BF16, FMT>(raw, sb, q);
  if (FAKE) {
    // mx_fakequant_rows_*: the chunk's MX values as bf16 at p.q (2 bytes per element)
    constexpr mx_u32 THR = FMT == 0 ? 10u : 17u;
    const bool fast = (sb >= THR && sb <= 253u) || am == 0u;
    mx_u16* out = FAKE == 1 ? reinterpret_cast<mx_u16*>(p.q) : vals;
    if (IN_BF16) {
      *reinterpret_cast<uint4*>(out + 8 * c) =
          make_uint4(mxfq_bf16x2<FMT>(q[0] & 0xFFFFu, sb, fast), mxfq_bf16x2<FMT>(q[0] >> 16, sb, fast),
                     mxfq_bf16x2<FMT>(q[QW - 1] & 0xFFFFu, sb, fast), mxfq_bf16x2<FMT>(q[QW - 1] >> 16, sb, fast));
    } else {
      *reinterpret_cast<uint2*>(out + 4 * c) =
          make_uint2(mxfq_bf16x2<FMT>(q[0] & 0xFFFFu, sb, fast), mxfq_bf16x2<FMT>(q[0] >> 16, sb, fast));
    }
    if (FAKE == 1) return;
  }
  if (IN_BF16) {
    uint2* dst = reinterpret_cast<uint2*>(p.q + 8 * c);
    if (CS == 1) __stcs(dst, make_uint2(q[0], q[QW - 1])); else *dst = make_uint2(q[0], q[QW - 1]);
  } else {
    unsigned int* dst = reinterpret_cast<unsigned int*>(p.q + 4 * c);
    if (CS == 1) __stcs(dst, q[0]); else *dst = q[0];
  }
  if (!NOSC && (lane & (CPB - 1)) == 0) p.s[c / CPB] = (mx_u8)sb;
}

template <int IN_BF16, int FMT, int U, int CS, int PF, int FAKE = 0, int NOSC = 0>
MX_DEV void mx_quant_flat(const MxQuantFlatParams& p, mx_u16* vals = nullptr) {
  constexpr int CPB = IN_BF16 ? 4 : 8;  // chunks per block
  const mx_i64 nchunks = p.nblocks * CPB;
  const mx_i64 stride = (mx_i64)gridDim.x * blockDim.x;
  const int lane = threadIdx.x & 31;
  const uint4* in = reinterpret_cast<const uint4*>(p.in);
  mx_u32 raw[U][4], nxt[PF ? U : 1][4];
  // c0 - lane is the warp's first chunk: the loop condition is warp-uniform (shuffles).
  mx_i64 c0 = (mx_i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (PF && c0 - lane < nchunks) {
#pragma unroll
    for (int u = 0; u < U; ++u) mxqf_set(raw[u], mxqf_load1<CS>(in, c0 + u * stride, nchunks));
  }
  for (; c0 - lane < nchunks; c0 += U * stride) {
    if (PF) {
      if (c0 + U * stride - lane < nchunks) {
#pragma unroll
        for (int u = 0; u < U; ++u) mxqf_set(nxt[PF ? u : 0], mxqf_load1<CS>(in, c0 + (U + u) * stride, nchunks));
      }
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) mxqf_set(raw[u], mxqf_load1<CS>(in, c0 + u * stride, nchunks));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) mxqf_chunk<IN_BF16, FMT, CS, FAKE, NOSC>(p, raw[u], c0 + u * stride, nchunks, lane, vals);
    if (PF) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < 4; ++i) raw[u][i] = nxt[PF ? u : 0][i];
    }
  }
}

// Both in one pass (quantize with ABI 1.2 `values`): the FP8 bytes and scales of
// mx_quantize_rows_* and, at vals, the MX values of mx_fakequant_rows_* (nblocks * 32 bf16,
// 16-byte aligned). The values serve the GEMMs that run on the BF16 tensor cores without
// a dequantization pass per call.
struct MxQuantFlatValsParams {
  MxQuantFlatParams p;
  mx_u16* vals;
};
static_assert(sizeof(MxQuantFlatValsParams) == 48, "QuantFlatValsParams in src/backend/cuda/params.rs hard-codes 48 bytes");
