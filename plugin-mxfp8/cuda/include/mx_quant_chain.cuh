// mx_quant_chain.cuh — 1x32 quantization of bf16 rows and the chained GEMM's A-side chain form
// in one pass (mx_quantize_rows_chain_<fmt>): what a quantize call with an annex (ABI 1.3) for
// X or dY writes. Outputs: the MX tensor (q, s: the bytes and scales mx_quantize_rows_* writes),
// the stage-uniform copy q2 with its scales s2, the residual lists and counts and the status
// words (as mx_reencode_rows writes them from q, s), and q2, s2 transposed (as two
// mx_transpose_u8 write them). Same bytes as that sequence of four launches
// (MXHOST_MX_CHAIN_VERIFY=1 compares them on the device), but the input is read once and the
// bytes are not read back: 5 bytes moved per element instead of 7 (docs/perf.md run 113).
//
// CTA: 128 threads on one 32-row tile at a time (grid-stride over tiles), walking its rows'
// 128-column stages in order, so each row's residuals are listed in k order with a running
// count as mx_reencode_rows lists them (same slots, same overflow rule). Lane l of warp w
// holds row 8w + l/4 and the whole 32-column block l % 4 of the stage (64 bytes of bf16,
// four 16-byte loads, the next stage's loaded while this one is computed): a block's amax,
// scale byte and re-encoding are one lane's work, with no shuffles, and the stage's largest
// scale is two xor-shuffles over the row's 4 lanes. (Run 114's layout, 8 elements per lane
// and a block over 4 lanes, issued ~32 instructions per element, 4x redundant per-block
// work; ncu: issue-bound at 2.3 TB/s.) q2's bytes go through a [128 columns][32 rows]
// shared tile (swizzled: mxqc_tile_at) to 32-byte transposed rows, one column per thread.
// Requires C % 32 == 0, R % 16 == 0, the input, q and q2 16-byte aligned (the host checks;
// other tensors take the four launches). Requires mx_quant_blocks.cuh and mx_reencode.cuh.
// NVRTC-clean.
#pragma once

// Resident CTAs per SM the launch bounds ask for (the host's grid rule counts on it:
// CTAS_PER_SM in src/backend/cuda/chain_quant.rs).
#ifndef MXQC_CTAS_PER_SM
#define MXQC_CTAS_PER_SM 8
#endif

struct MxQuantChainParams {
  const mx_u16* in;              // [R][C] bf16
  mx_u8* q; mx_u8* s;            // the MX tensor: [R][C], [R][C / 32]
  mx_u8* q2; mx_u8* s2;          // the stage-uniform copy, same layouts
  MxRes* res; int* cnt; int* status;   // res[r * slots + i], i < cnt[r]; status[2], zeroed by the host
  mx_u8* at; mx_u8* sat;         // q2 and s2 transposed: [C][R], [C / 32][R]
  int R, C, slots, mode;
};

MX_DEV void mxqc_set(mx_u32 (&w)[4], uint4 v) { w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w; }

// The lane's block at column col of row xr: four 16-byte chunks (zeros outside the tensor).
MX_DEV void mxqc_load(mx_u32 (&raw)[4][4], const mx_u16* xr, int col, bool ok) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    mxqc_set(raw[i], ok ? __ldg(reinterpret_cast<const uint4*>(xr + col) + i) : make_uint4(0u, 0u, 0u, 0u));
}

// The block's amax as mxq_chunk_amax<1> gives it (bf16 magnitude bits << 16), by packed
// 16-bit maxima: two instructions per word instead of four.
MX_DEV mx_u32 mxqc_block_amax(const mx_u32 (&raw)[4][4]) {
  mx_u32 m = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k) m = mxq_max_u16x2(m, raw[i][k] & 0x7FFF7FFFu);
  return max(m & 0xFFFFu, m >> 16) << 16;
}

// Byte offset in the shared tile of (column kk of the stage, row rl of the tile): column kk
// is 32 bytes, rows in order, its eight 4-row words XOR-swizzled by s = 2 (kk / 32) ^
// 4 ((kk / 4) & 1). Then the byte stores of one instruction (one column per block of the
// stage, rows of one warp) hit 8 banks, and the 16-byte reads of 8 consecutive columns
// (one transposed half each) hit all 32.
MX_DEV int mxqc_swz(int kk) { return (((kk >> 5) & 3) << 1) ^ (((kk >> 2) & 1) << 2); }
MX_DEV int mxqc_tile_at(int kk, int rl) { return 32 * kk + 4 * ((rl >> 2) ^ mxqc_swz(kk)) + (rl & 3); }

// Lists the residual bytes of one word (bit i of m4: byte i of w) at slots from `slot` on,
// column k0 + i, with the block's scale; returns the next slot.
template <int FMT>
MX_DEV int mxqc_list(MxRes* rr, int slot, mx_u32 m4, mx_u32 w, int k0, float scale) {
  for (; m4; m4 &= m4 - 1) {
    const int i = __ffs((int)m4) - 1;
    rr[slot++] = MxRes{k0 + i, mx_fp8_value<FMT>((w >> (8 * i)) & 0xFFu) * scale};
  }
  return slot;
}

template <int FMT>
MX_DEV void mx_quant_chain_rows(const MxQuantChainParams& p) {
  __shared__ __align__(16) mx_u8 tq[2][128 * 32];   // two stages' q2 tiles (mxqc_tile_at)
  __shared__ int listed;                           // this CTA's residuals: one atomic on status[1]
  const int t = threadIdx.x, w = t >> 5, lane = t & 31;
  const int rl = 8 * w + (lane >> 2), bi = lane & 3;
  const int C = p.C, KB = C >> 5;
  if (t == 0) listed = 0;
  __syncthreads();
  int flags = 0, stage = 0;
  const int ntiles = (p.R + 31) >> 5;
  for (int tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
    const int r0 = 32 * tile, r = r0 + rl;
    const bool rowok = r < p.R;
    const mx_u16* xr = p.in + (mx_i64)(rowok ? r : 0) * C;
    MxRes* rr = p.res + (mx_i64)r * p.slots;
    int run = 0;
    mx_u32 raw[4][4], nxt[4][4];
    mxqc_load(nxt, xr, 32 * bi, rowok && 32 * bi < C);
    for (int c0 = 0; c0 < C; c0 += 128, ++stage) {
      const int col = c0 + 32 * bi;
      const bool valid = col < C;   // (C % 32 == 0: a block is whole or absent)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) raw[i][k] = nxt[i][k];
      mxqc_load(nxt, xr, col + 128, rowok && col + 128 < C);
      const mx_u32 sb = mx_scale_byte<FMT, true>(mxqc_block_amax(raw), p.mode);
      mx_u32 q[8], q2[8], miss = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) mxq_quant_chunk<1, FMT>(raw[i], sb, q + 2 * i);
      // the stage's largest scale byte over the row's 4 lanes
      mx_u32 S = valid ? sb : 0u;
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 1));
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 2));
      if (rowok && S == 0xFFu) flags |= MX_RES_NONFINITE;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        mx_u32 mi;
        q2[i] = valid ? mx_fp8_shift4<FMT>(q[i], S - sb, mi) : 0u;
        if (valid) miss |= mi << (4 * i);
      }
      // the residuals in k order: block 0 of the stage, then 1, 2, 3 (lanes bi = 0..3)
      const int n = __popc(miss);
      int incl = n;
#pragma unroll
      for (int d = 1; d < 4; d <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, incl, d, 4);
        if (bi >= d) incl += u;
      }
      const int tot = __shfl_sync(0xffffffffu, incl, 3, 4);
      if (rowok) {
        if (run + tot > p.slots) {
          flags |= MX_RES_OVERFLOW;
        } else if (n) {
          const float scale = mx_e8m0_to_f32(sb);
          int slot = run + incl - n;
#pragma unroll
          for (int i = 0; i < 8; ++i) slot = mxqc_list<FMT>(rr, slot, (miss >> (4 * i)) & 15u, q[i], col + 4 * i, scale);
        }
      }
      run = min(run + tot, p.slots + 1);
      // row-major outputs
      if (rowok && valid) {
        const mx_i64 o = (mx_i64)r * C + col;
        uint4* dq = reinterpret_cast<uint4*>(p.q + o);
        uint4* dq2 = reinterpret_cast<uint4*>(p.q2 + o);
        dq[0] = make_uint4(q[0], q[1], q[2], q[3]);
        dq[1] = make_uint4(q[4], q[5], q[6], q[7]);
        dq2[0] = make_uint4(q2[0], q2[1], q2[2], q2[3]);
        dq2[1] = make_uint4(q2[4], q2[5], q2[6], q2[7]);
        const int kb = col >> 5;
        p.s[(mx_i64)r * KB + kb] = (mx_u8)sb;
        p.s2[(mx_i64)r * KB + kb] = (mx_u8)S;
        p.sat[(mx_i64)kb * p.R + r] = (mx_u8)S;
      }
      // q2's bytes into the shared tile
      // (byte b of the block is column 32 bi + b, swizzle 2 bi ^ 4 ((b / 4) & 1): two base
      // addresses, the rest immediate offsets)
      mx_u8* tb = tq[stage & 1];
      mx_u8* wb[2] = {tb + mxqc_tile_at(32 * bi, rl), tb + mxqc_tile_at(32 * bi + 4, rl) - 128};
#pragma unroll
      for (int b = 0; b < 32; ++b) wb[(b >> 2) & 1][32 * b] = (mx_u8)(q2[b >> 2] >> (8 * (b & 3)));
      __syncthreads();
      // transposed rows: thread t writes column c0 + t, rows 0-15 and 16-31 of the tile
      if (c0 + t < C) {
        const int s = mxqc_swz(t);
        mx_u8* dst = p.at + (mx_i64)(c0 + t) * p.R + r0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (r0 + 16 * h < p.R) {
            // logical words 4h..4h+3 sit in physical half h ^ (s / 4), pairs swapped when s & 2
            const uint4 v = *reinterpret_cast<const uint4*>(tb + 32 * t + 16 * (h ^ (s >> 2)));
            const bool sw = (s & 2) != 0;
            *reinterpret_cast<uint4*>(dst + 16 * h) =
                sw ? make_uint4(v.z, v.w, v.x, v.y) : v;
          }
        }
      }
    }
    if (rowok && bi == 0) {
      p.cnt[r] = run > p.slots ? 0 : run;
      if (run > 0 && run <= p.slots) atomicAdd(&listed, run);
    }
  }
  flags = __reduce_or_sync(0xffffffffu, flags);
  if (lane == 0 && flags) atomicOr(p.status, flags);
  __syncthreads();
  if (t == 0 && listed) atomicAdd(p.status + 1, listed);
}
