// mx_quant_chain.cuh — 1x32 quantization of bf16 rows and the chained GEMM's A-side chain form
// in one pass (mx_quantize_rows_chain_<fmt>): what a quantize call with an annex (ABI 1.3) for
// X or dY writes. Outputs: the MX tensor (q, s: the bytes and scales mx_quantize_rows_* writes),
// the stage-uniform copy q2 with its scales s2, the residual lists and counts and the status
// words (as mx_reencode_rows writes them from q, s), and q2, s2 transposed (as two
// mx_transpose_u8 write them). Same bytes as that sequence of four launches
// (MXHOST_MX_CHAIN_VERIFY=1 compares them on the device), but the input is read once and the
// bytes are not read back: 5 bytes moved per element instead of 7 (docs/perf.md run 113).
//
// CTA: 256 threads on one 32-row tile at a time (grid-stride over tiles), walking its rows'
// 128-column stages in order, so each row's residuals are listed in k order with a running
// count as mx_reencode_rows lists them (same slots, same overflow rule). Thread layout of the
// tiled quantizer for bf16 (mx_quant_tile.cuh): warp w holds rows 4w..4w+3; lane l holds row
// 4w + l/8 and, with j = l % 8, the 8 columns at 64 k + 8 j of the stage for k = 0, 1, so a
// 32-column block is 4 lanes and a stage's 4 blocks are the row's 8 lanes. The stage's q2
// bytes go through a [128][32] shared tile (4-byte words XOR-swizzled by the column's j, so
// the byte stores of a warp hit 8 banks) to 32-byte transposed rows.
// Run 115 tried one lane per whole 32-element block (commit a770867): a third fewer
// instructions, but 40 % slower, latency-bound (a lane's 64 contiguous bytes make every
// load and store instruction half-fill 32 sectors); this layout stayed.
// Requires C % 32 == 0, R % 16 == 0, the input 16-byte aligned, q and q2 8-byte aligned (the
// host checks; other tensors take the four launches). Requires mx_quant_blocks.cuh and
// mx_reencode.cuh. NVRTC-clean.
#pragma once

struct MxQuantChainParams {
  const mx_u16* in;              // [R][C] bf16
  mx_u8* q; mx_u8* s;            // the MX tensor: [R][C], [R][C / 32]
  mx_u8* q2; mx_u8* s2;          // the stage-uniform copy, same layouts
  MxRes* res; int* cnt; int* status;   // res[r * slots + i], i < cnt[r]; status[2], zeroed by the host
  mx_u8* at; mx_u8* sat;         // q2 and s2 transposed: [C][R], [C / 32][R]
  int R, C, slots, mode;
};

MX_DEV void mxqc_set(mx_u32 (&w)[4], uint4 v) { w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w; }

// The thread's two chunks of stage c0 (zeros outside the tensor).
MX_DEV void mxqc_load(mx_u32 (&raw)[2][4], const mx_u16* xr, int c0, int j, int C, bool rowok) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int col = c0 + 64 * k + 8 * j;
    mxqc_set(raw[k], rowok && col < C ? __ldg(reinterpret_cast<const uint4*>(xr + col)) : make_uint4(0u, 0u, 0u, 0u));
  }
}

// Inclusive sum over the 8 lanes of a row (j = lane % 8).
MX_DEV int mxqc_scan8(int v, int j) {
#pragma unroll
  for (int d = 1; d < 8; d <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, v, d, 8);
    if (j >= d) v += u;
  }
  return v;
}

// Lists the residual bytes of one chunk (bit i of miss: byte i of the original words w) at
// slots from `slot` on, column k0 + i, with the chunk's block scale byte sc.
template <int FMT>
MX_DEV void mxqc_list(MxRes* rr, int slot, mx_u32 miss, const mx_u32 (&w)[2], int k0, mx_u32 sc) {
  const float scale = mx_e8m0_to_f32(sc);
  for (mx_u32 m = miss; m; m &= m - 1) {
    const int i = __ffs((int)m) - 1;
    const mx_u32 b = ((i & 4) ? w[1] : w[0]) >> (8 * (i & 3)) & 0xFFu;
    rr[slot++] = MxRes{k0 + i, mx_fp8_value<FMT>(b) * scale};
  }
}

template <int FMT>
MX_DEV void mx_quant_chain_rows(const MxQuantChainParams& p) {
  __shared__ __align__(16) mx_u32 tq[2][128 * 8];   // two stages' q2 tiles: word (k, row / 4)
  __shared__ int listed;                           // this CTA's residuals: one atomic on status[1]
  const int t = threadIdx.x, w = t >> 5, lane = t & 31;
  const int rl = 4 * w + (lane >> 3), j = lane & 7;
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
    // Stages c0 (raw), c0 + 128 (nx1) and c0 + 256 (nx2) in registers: the loads of two stages
    // (four 16-byte loads per thread) are in flight while one is computed (run 113: with one
    // stage ahead the kernel read its input at ~2 TB/s).
    mx_u32 raw[2][4], nx1[2][4], nx2[2][4];
    mxqc_load(raw, xr, 0, j, C, rowok);
    mxqc_load(nx1, xr, 128, j, C, rowok);
    for (int c0 = 0; c0 < C; c0 += 128, ++stage) {
      mxqc_load(nx2, xr, c0 + 256, j, C, rowok);
      mx_u32 sb[2], S = 0, q[2][2], q2[2][2], miss[2];
      bool valid[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        valid[k] = c0 + 64 * k + 8 * j < C;   // (C % 32 == 0: a block is whole or absent)
        mx_u32 am = mxq_chunk_amax<1>(raw[k]);
        am = max(am, __shfl_xor_sync(0xffffffffu, am, 1));
        am = max(am, __shfl_xor_sync(0xffffffffu, am, 2));
        sb[k] = mx_scale_byte<FMT, true>(am, p.mode);
        mxq_quant_chunk<1, FMT>(raw[k], sb[k], q[k]);
        if (valid[k]) S = max(S, sb[k]);
      }
      // the stage's largest scale byte: blocks {0, 2} on lanes j < 4, {1, 3} on j >= 4
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 4));
      if (rowok && S == 0xFFu) flags |= MX_RES_NONFINITE;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        miss[k] = 0;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          mx_u32 mi;
          q2[k][i] = valid[k] ? mx_fp8_shift4<FMT>(q[k][i], S - sb[k], mi) : 0u;
          if (valid[k]) miss[k] |= mi << (4 * i);
        }
      }
      // the residuals in k order: chunk 0 of lanes j = 0..7, then chunk 1
      const int n0 = __popc(miss[0]), n1 = __popc(miss[1]);
      const int i0 = mxqc_scan8(n0, j), i1 = mxqc_scan8(n1, j);
      const int tot0 = __shfl_sync(0xffffffffu, i0, 7, 8), tot1 = __shfl_sync(0xffffffffu, i1, 7, 8);
      if (rowok) {
        if (run + tot0 + tot1 > p.slots) {
          flags |= MX_RES_OVERFLOW;
        } else {
          if (n0) mxqc_list<FMT>(rr, run + i0 - n0, miss[0], q[0], c0 + 8 * j, sb[0]);
          if (n1) mxqc_list<FMT>(rr, run + tot0 + i1 - n1, miss[1], q[1], c0 + 64 + 8 * j, sb[1]);
        }
      }
      run = min(run + tot0 + tot1, p.slots + 1);
      // row-major outputs
      mx_u32* tb = tq[stage & 1];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int col = c0 + 64 * k + 8 * j;
        if (rowok && valid[k]) {
          const mx_i64 o = (mx_i64)r * C + col;
          *reinterpret_cast<uint2*>(p.q + o) = make_uint2(q[k][0], q[k][1]);
          *reinterpret_cast<uint2*>(p.q2 + o) = make_uint2(q2[k][0], q2[k][1]);
          if ((j & 3) == 0) {
            const int kb = col >> 5;
            p.s[(mx_i64)r * KB + kb] = (mx_u8)sb[k];
            p.s2[(mx_i64)r * KB + kb] = (mx_u8)S;
            p.sat[(mx_i64)kb * p.R + r] = (mx_u8)S;
          }
        }
        // q2's bytes into the shared tile: byte (column kk, row rl) in word kk * 8 + ((rl / 4) ^ j)
        mx_u8* tbb = reinterpret_cast<mx_u8*>(tb);
#pragma unroll
        for (int b = 0; b < 8; ++b) {
          const int kk = 64 * k + 8 * j + b;
          tbb[4 * (kk * 8 + (w ^ j)) + (rl & 3)] = (mx_u8)(q2[k][b >> 2] >> (8 * (b & 3)));
        }
      }
      __syncthreads();
      // transposed rows: thread t writes column c0 + t / 2, rows 16 (t % 2) .. + 15 of the tile
      {
        const int kk = t >> 1, h = t & 1, g = (kk >> 3) & 7;
        if (c0 + kk < C && r0 + 16 * h < p.R) {
          const mx_u32* row = tb + kk * 8;
          *reinterpret_cast<uint4*>(p.at + (mx_i64)(c0 + kk) * p.R + r0 + 16 * h) =
              make_uint4(row[(4 * h) ^ g], row[(4 * h + 1) ^ g], row[(4 * h + 2) ^ g], row[(4 * h + 3) ^ g]);
        }
      }
#pragma unroll
      for (int k = 0; k < 2; ++k)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          raw[k][i] = nx1[k][i];
          nx1[k][i] = nx2[k][i];
        }
    }
    if (rowok && j == 0) {
      p.cnt[r] = run > p.slots ? 0 : run;
      if (run > 0 && run <= p.slots) atomicAdd(&listed, run);
    }
  }
  flags = __reduce_or_sync(0xffffffffu, flags);
  if (lane == 0 && flags) atomicOr(p.status, flags);
  __syncthreads();
  if (t == 0 && listed) atomicAdd(p.status + 1, listed);
}
