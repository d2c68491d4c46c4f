// mx_chain_need.cuh — which columns of an A operand's transposed copy the chained GEMM reads
// (mx_chain_need_map): a bit map per expert of the reduction indices k where its weight (the
// GEMM's B) has a residual, built from the weight's B residual lists.
//
// The chained GEMM's B-residual corrections (A' B_res, mx_tgemm_chain.cuh) read at (A's
// stage-uniform copy transposed, [C][R]) only at those k and only for that expert's rows; the
// one-pass X/dY quantizer (mx_quant_block_form.cuh, its need map) then stores only the 16-row
// chunks of at that some expert of the chunk needs (plugin ABI 1.9: the partner weight is given
// at the quantize call, its lists already built). One thread per list row (grid-stride); a
// row's list is k-ascending, so its k of one 32-bit word go out in one atomicOr. A list that
// overflowed (cnt > slots: the GEMM gate sends the call to the per-k32 kernel, which reads no
// at) is read up to its slots. The host zeroes need first.
// Requires mx_reencode.cuh (MxRes). NVRTC-clean.
#pragma once

struct MxNeedMapParams {
  const MxRes* res; const int* cnt;   // the weight's B residual lists: row e * n + j (j < n),
                                      //   res[row * slots + i], i < cnt[row]
  mx_u32* need;                       // [E][nw] words, bit k % 32 of word k / 32; zeroed first
  mx_i64 rows;                        // E * n
  int n, slots, nw;                   // rows per expert, list slots per row, words per expert
};

template <int UNUSED = 0>
MX_DEV void mx_chain_need_map(const MxNeedMapParams& p) {
  for (mx_i64 row = (mx_i64)blockIdx.x * blockDim.x + threadIdx.x; row < p.rows;
       row += (mx_i64)gridDim.x * blockDim.x) {
    mx_u32* need = p.need + (row / p.n) * p.nw;
    const MxRes* res = p.res + row * p.slots;
    const int cnt = min(p.cnt[row], p.slots);
    int word = -1;   // the word `bits` belongs to
    mx_u32 bits = 0u;
    for (int i = 0; i < cnt; ++i) {
      const int k = res[i].k;
      if ((unsigned)k >= 32u * (unsigned)p.nw) continue;   // (no such column: nothing to need)
      if (k >> 5 != word) {
        if (bits) atomicOr(need + word, bits);
        word = k >> 5;
        bits = 0u;
      }
      bits |= 1u << (k & 31);
    }
    if (bits) atomicOr(need + word, bits);
  }
}
