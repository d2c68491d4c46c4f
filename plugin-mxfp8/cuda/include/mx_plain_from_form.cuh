// mx_plain_from_form.cuh — an A operand's MX bytes (X or dY, 1x32 blocks along rows) written back
// from its chain form, for a tensor whose quantize call left them out (mx_quant_block_form.cuh
// NOQ: it stored q only in the row-stages with a residual or a non-finite stage scale). Every
// other row-stage's bytes are q2 shifted back by s2 - s, exactly (mx_fp8_unshift); the row-stages
// the quantizer stored are left alone. So after this kernel q is what the plain quantizer writes.
// gate (optional): run only when the chained GEMM did not take the output (mx_chain_took over
// [0, limit]), i.e. when the per-k32 kernel enqueued after it will read q; null: always.
// rpe = 0 (X, dY): the stage scales s2 are read transposed, [C / 32][R] (the annex's sat: the
// form kernel's NOQ builds write no row-major copy), so the blocks are walked rows fastest (the
// reads of s2 and mc coalesced; q2 and q are whole 32-byte sectors either way). st (rpe = 0,
// optional): the scales s left out too (mx_quant_block_form.cuh, NOQ with s null), transposed as
// s2; every block's scale byte is then written to s from it, the row-stages the quantizer
// stored included.
// rpe > 0: a weight's bytes instead (W or Wᵀ of mx_reencode_pair.cuh's NOQ, 32x32 tiles): R = E rpe
// rows of C bytes, scales s[e][ceil(rpe / 32)][C / 32] (s2 likewise), mc[(c / 128) * R + e rpe + r].
// One thread per 32-byte block, grid-stride. Requires mx_ptx.cuh, mx_numerics.cuh,
// mx_fp8_shift.cuh and mx_warp.cuh (mx_chain_took). NVRTC-clean.
#pragma once

struct MxPlainFromFormParams {
  mx_u8* q; mx_u8* s;                // the MX tensor: [R][C], [R][C / 32] (written only with st)
  const mx_u8* q2; const mx_u8* s2;  // its stage-uniform copy: q2 as q; s2 as s, but [C / 32][R] if rpe = 0
  const mx_u8* mc;                   // residuals per row and stage: mc[(c / 128) * R + r]
  const int* gate; int limit;
  int R, C;                          // C % 32 == 0
  int rpe;                           // 0: 1x32 blocks along rows; else rows per expert of 32x32 tiles
  const mx_u8* st;                   // rpe = 0: s transposed, [C / 32][R], if s was left out; else null
};

template <int FMT>
MX_DEV void mx_plain_from_form(const MxPlainFromFormParams& p) {
  if (p.gate != nullptr && mx_chain_took(p.gate, p.limit, 0)) return;
  const int KB = p.C >> 5;
  const mx_i64 n = (mx_i64)p.R * KB;
  for (mx_i64 t = (mx_i64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (mx_i64)gridDim.x * blockDim.x) {
    mx_i64 r, si, si2;   // the block's row, scale byte in s and in s2
    int kb;
    if (p.rpe > 0) {
      r = t / KB;
      kb = (int)(t - r * KB);
      const mx_i64 e = r / p.rpe;
      si = si2 = (e * ((p.rpe + 31) >> 5) + ((r - e * p.rpe) >> 5)) * KB + kb;
    } else {
      kb = (int)(t / p.R);
      r = t - (mx_i64)kb * p.R;
      si = r * KB + kb;
      si2 = t;
    }
    const mx_i64 i = r * KB + kb;   // the block's 32 bytes are q[32 i ..]
    const mx_u32 S = p.s2[si2];
    mx_u32 sb;
    if (p.st != nullptr) {
      sb = p.st[t];
      p.s[si] = (mx_u8)sb;
    } else {
      sb = p.s[si];
    }
    if (S == 0xFFu || p.mc[(mx_i64)(kb >> 2) * p.R + r] != 0) continue;   // stored by the quantizer
    const mx_u32 d = S - sb;
    const uint4* src = reinterpret_cast<const uint4*>(p.q2 + i * 32);
    uint4* dst = reinterpret_cast<uint4*>(p.q + i * 32);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4 v = src[h];
      mx_u32* w = reinterpret_cast<mx_u32*>(&v);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        mx_u32 o = 0u;
#pragma unroll
        for (int b = 0; b < 4; ++b) o |= mx_fp8_unshift<FMT>((w[j] >> (8 * b)) & 0xFFu, d) << (8 * b);
        w[j] = o;
      }
      dst[h] = v;
    }
  }
}
