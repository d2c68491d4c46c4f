// mx_reencode_block.cuh — the chain form (mx_reencode.cuh) of an A operand (X or dY: rows in
// 1x32 blocks along the reduction) and its transposed copy from one read of the operand's bytes,
// for a quantize call that writes the tensor with its annex (src/backend/cuda/chain_block.rs).
//
// The three launches it replaces (mx_reencode_rows, then mx_transpose_u8 of the copy and of its
// scales) read the bytes twice and write them twice. A 128 x 128 block of A per CTA is one
// 128-deep stage of 128 rows: each row's stage scale is the largest of its four block scales,
// all in the CTA. The CTA writes
//   q2  (A re-encoded, [R][C])       at  (q2 transposed, [C][R], through shared memory)
//   s2  (stage scale bytes, [R][KB]) sat (s2 transposed, [KB][R])
// and per row and stage the number of elements that did not survive the shift (mc: the
// residuals, rare). mx_chain_lists (mx_reencode_pair.cuh) turns those counts into each row's list
// in reduction order, re-reading only the stages with residuals, exactly as mx_reencode_rows
// lists them (same records, order, overflow rule and status words), so every byte equals the
// three launches' (MXHOST_MX_CHAIN_VERIFY compares them).
// Traffic: 1 byte read and 2 written per element, against 2 and 2.
// Requires mx_ptx.cuh, mx_numerics.cuh and mx_reencode.cuh. NVRTC-clean.
#pragma once

// A [R][C], scales s[R][KB] (KB = ceil(C / 32)). R % 16 == 0, C % 4 == 0, q 4-byte aligned,
// at 16-byte aligned (the host checks).
struct MxReencodeBlockParams {
  const mx_u8* q; const mx_u8* s;
  mx_u8* q2; mx_u8* s2;   // [R][C], [R][KB]
  mx_u8* at; mx_u8* sat;  // [C][R], [KB][R]
  mx_u8* mc;              // residuals per row and stage: mc[(c / 128) * R + r]
  int* status;            // this kernel ORs MX_RES_NONFINITE into status[0]
  int R, C;
};

// Grid (ceil(C / 128), ceil(R / 128)), 256 threads. Thread (warp w, lane l) holds the words of
// rows 16 w + i (i < 16) at bytes 4 l .. 4 l + 3 of the block: all in block l / 8 of the stage.
// The transpose is mx_reencode_pair's (4x4 byte transposes in registers, swizzled words, 16-byte
// stores along the transposed rows).
template <int FMT>
MX_DEV void mx_reencode_block(const MxReencodeBlockParams& p) {
  __shared__ __align__(16) mx_u32 sm[128 * 32];   // q2 transposed
  __shared__ mx_u8 sc[128][4];                    // the block's scale bytes [row][block]
  __shared__ mx_u8 srow[128];                     // each row's stage scale
  __shared__ int rowc[128];                       // residuals per row
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int c0 = blockIdx.x * 128, r0 = blockIdx.y * 128;
  const int R = p.R, C = p.C, KB = (C + 31) >> 5, kb0 = c0 >> 5;
  // scale bytes: two per thread, a row's four consecutive ones on four consecutive threads
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int i = t + 256 * m, rr = i >> 2, b = i & 3;
    const bool ok = r0 + rr < R && kb0 + b < KB;
    sc[rr][b] = ok ? p.s[(mx_i64)(r0 + rr) * KB + kb0 + b] : (mx_u8)0;
  }
  if (t < 128) rowc[t] = 0;
  __syncthreads();
  if (t < 128) {
    const mx_u32 S = max(max((mx_u32)sc[t][0], (mx_u32)sc[t][1]), max((mx_u32)sc[t][2], (mx_u32)sc[t][3]));
    srow[t] = (mx_u8)S;
    if (S == 0xFFu && r0 + t < R) atomicOr(p.status, MX_RES_NONFINITE);
  }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int i = t + 256 * m;
    {   // s2: a row's bytes on consecutive threads
      const int rr = i >> 2, b = i & 3;
      if (r0 + rr < R && kb0 + b < KB) p.s2[(mx_i64)(r0 + rr) * KB + kb0 + b] = srow[rr];
    }
    {   // sat: a block's rows on consecutive threads
      const int rr = i & 127, b = i >> 7;
      if (r0 + rr < R && kb0 + b < KB) p.sat[(mx_i64)(kb0 + b) * R + r0 + rr] = srow[rr];
    }
  }
  const int tb = lane >> 3;
  const bool rows_ok = r0 + 16 * warp < R;   // R % 16 == 0: a warp's 16 rows are all in or out
  const bool word_ok = rows_ok && c0 + 4 * lane < C;
  const mx_i64 row0 = (mx_i64)r0 + 16 * warp;
  mx_u32 w[16];
#pragma unroll
  for (int i = 0; i < 16; ++i)
    w[i] = word_ok ? *reinterpret_cast<const mx_u32*>(p.q + (row0 + i) * C + c0 + 4 * lane) : 0u;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int rr = 16 * warp + i;
    mx_u32 miss;
    w[i] = mx_fp8_shift4<FMT>(w[i], (mx_u32)srow[rr] - (mx_u32)sc[rr][tb], miss);
    if (word_ok) *reinterpret_cast<mx_u32*>(p.q2 + (row0 + i) * C + c0 + 4 * lane) = w[i];
    if (miss) atomicAdd(&rowc[rr], __popc(miss));
  }
  // ---- the transpose ----
#pragma unroll
  for (int blk = 0; blk < 4; ++blk)
    mx_t128_put(sm, warp, lane, blk, w[4 * blk], w[4 * blk + 1], w[4 * blk + 2], w[4 * blk + 3]);
  __syncthreads();
  const int j = t & 7;   // 16-byte chunk of a transposed row: block rows 16 j .. 16 j + 15
  const bool chunk_ok = r0 + 16 * j < R;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int c = (t >> 3) + 32 * k;
    const uint4 v = mx_t128_get(sm, c, j);
    if (chunk_ok && c0 + c < C) *reinterpret_cast<uint4*>(p.at + (mx_i64)(c0 + c) * R + r0 + 16 * j) = v;
  }
  // ---- residual counts per row and stage ----
  if (t < 128 && r0 + t < R) p.mc[(mx_i64)blockIdx.x * R + r0 + t] = (mx_u8)rowc[t];
}
