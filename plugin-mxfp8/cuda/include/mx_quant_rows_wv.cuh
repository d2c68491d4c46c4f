// mx_quant_rows_wv.cuh — 1x32 quantization of bf16 rows and the wgrad operand's values in one
// pass (mx_quantize_rows_wv_bf16_<fmt>): X read once for the forward's MX tensor and for what
// mx_fakequant_m32 would write from it for wgrad.
//
// Outputs: q [R][C] and s [R][C / 32], the bytes and scales mx_quantize_rows_* writes (1x32
// blocks along C), and wv [R][C] bf16, the MX values of 32x1 blocks along R aligned at rows
// 32 k (rows past R count as zeros), bit-identical to mx_fakequant_m32 with the blocks
// (32 k, min(32, R - 32 k)): its column amax, scale bytes, fast path and reference path are
// the same functions (mx_fakequant.cuh).
// Traffic: 2 bytes read and 1 + 1/32 + 2 written per element, against 2 + 1 + 1/32 and 2 + 2
// for the two kernels.
// Launch: block 128, grid x = ceil(C / 128), y = min(ceil(R / 32), 65535) (any y >= 1: CTA y
// walks the 32-row blocks y, y + gridDim.y, ...). 256 bytes of static shared memory.
// Thread layout (mx_fakequant_m32's): warp w owns columns c0 + 32 w .. +31; lane 4 rg + cg holds
// columns 8 cg .. 8 cg + 7 of them in rows rg + 8 i (i < 4). A row's 1x32 block is then the four
// lanes of one rg, so both quantizations come from the same registers. Stores: q 8 bytes, wv 16
// bytes per lane and row (a warp: 32 and 64 contiguous bytes of 8 rows). s goes through shared
// memory: each warp's lanes cg = 0 put their rows' bytes there, and after a barrier thread t
// writes byte t & 3 of row t >> 2, so one warp store covers a row's 4 adjacent bytes (the CTA's
// 128 columns) instead of each warp storing one byte per row: 4x fewer L2 requests for s, which
// held the kernel L2-bound (run 152: 91 % L2 throughput at 76 % of DRAM). Two buffers, so one
// barrier per 32-row block suffices: a thread writes buffer b again only after the next block's
// barrier, which every thread reaches after its reads of b.
// Requires C % 32 == 0 (a warp's columns are all inside or all outside) and in, q, wv 16-byte
// aligned (the host checks; otherwise it runs the two kernels).
// VALS (mx_quantize_rows_vals_wv_bf16_*, quantize with ABI 1.2 `values` too): also the row
// blocks' MX values in bf16 at vals [R][C] (16-byte aligned), mx_quantize_rows_vals_*'s, from
// the same bytes and scale: a forward (dgrad) then runs cuBLAS on them without expanding the
// bytes, and the input is still read once for all three outputs.
// Requires mx_quant_blocks.cuh, mx_quant_values.cuh and mx_fakequant.cuh. NVRTC-clean.
#pragma once

struct MxQuantRowsWvParams {
  const mx_u16* in;        // [R][C] bf16
  mx_u8* q; mx_u8* s;      // [R][C], [R][C / 32]
  mx_u16* wv;              // [R][C] bf16
  int R, C, mode;
};
struct MxQuantRowsValsWvParams {
  MxQuantRowsWvParams p;
  mx_u16* vals;            // [R][C] bf16: the row blocks' MX values (VALS)
};

template <int FMT, int VALS = 0>
MX_DEV void mx_quant_rows_wv(const MxQuantRowsWvParams& p, mx_u16* vals = nullptr) {
  __shared__ mx_u8 sbuf[2][32][4];   // [block parity][row][warp]: the CTA's scale bytes
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int cg = lane & 3, rg = lane >> 2;
  const int b0 = rg & 1, b1 = (rg >> 1) & 1, b2 = rg >> 2;
  const int R = p.R, C = p.C, kb = C >> 5;
  const int col = blockIdx.x * 128 + w * 32 + cg * 8;
  // A warp whose columns are past C only joins the barriers (C % 32 == 0: all or none inside).
  const bool inside = blockIdx.x * 128 + w * 32 < C;
  // The s byte this thread stores after the barrier: row sr's k32 block sk.
  const int sr = threadIdx.x >> 2, sk = blockIdx.x * 4 + (threadIdx.x & 3);
  const int nblk = (R + 31) >> 5;
  for (int blk = blockIdx.y, par = 0; blk < nblk; blk += gridDim.y, par ^= 1) {
    const int row0 = blk * 32, nv = min(32, R - row0);
    if (inside) {
      mx_u32 raw[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = rg + 8 * i;
        const uint4 v = r < nv ? __ldg(reinterpret_cast<const uint4*>(p.in + (mx_i64)(row0 + r) * C + col))
                               : make_uint4(0u, 0u, 0u, 0u);
        raw[i][0] = v.x; raw[i][1] = v.y; raw[i][2] = v.z; raw[i][3] = v.w;
      }
      const mx_u32 am = mxfq_col_amax_bf16(raw, b0, b1, b2);
      mx_u32 slo, shi;
      const bool fast = mxfq_gather_scales<FMT>(mx_scale_byte<FMT, true>(am, p.mode), am, b0, b1, b2, slo, shi);
      float inv[8], sc[8];
      if (fast) mxfq_factors8(slo, shi, inv, sc);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = rg + 8 * i;
        const mx_i64 off = (mx_i64)(row0 + r) * C + col;
        // the row's 1x32 block: the four lanes of this rg (its bytes before the values: the other
        // order spills 8-16 bytes at 64 registers)
        mx_u32 ar = mxq_chunk_amax<1>(raw[i]);
        ar = max(ar, __shfl_xor_sync(0xffffffffu, ar, 1));
        ar = max(ar, __shfl_xor_sync(0xffffffffu, ar, 2));
        const mx_u32 sb = mx_scale_byte<FMT, true>(ar, p.mode);
        mx_u32 q[2];
        mxq_quant_chunk<1, FMT>(raw[i], sb, q);
        mx_u32 o[4];
        mxfq_values8<1, FMT>(raw[i], slo, shi, fast, inv, sc, o);
        if (r < nv) {
          *reinterpret_cast<uint4*>(p.wv + off) = make_uint4(o[0], o[1], o[2], o[3]);
          *reinterpret_cast<uint2*>(p.q + off) = make_uint2(q[0], q[1]);
          if (VALS) {
            // mx_quant_flat's values (FAKE 2): the bytes decoded with the row block's scale
            const bool rfast = mxfq_fast_ok<FMT>(sb, ar);
            *reinterpret_cast<uint4*>(vals + off) =
                make_uint4(mxfq_bf16x2<FMT>(q[0] & 0xFFFFu, sb, rfast), mxfq_bf16x2<FMT>(q[0] >> 16, sb, rfast),
                           mxfq_bf16x2<FMT>(q[1] & 0xFFFFu, sb, rfast), mxfq_bf16x2<FMT>(q[1] >> 16, sb, rfast));
          }
        }
        if (cg == 0) sbuf[par][r][w] = (mx_u8)sb;
      }
    }
    __syncthreads();
    if (sr < nv && sk < kb) p.s[(mx_i64)(row0 + sr) * kb + sk] = sbuf[par][sr][threadIdx.x & 3];
  }
}
