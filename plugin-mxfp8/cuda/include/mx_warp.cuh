// mx_warp.cuh — helpers written in plain CUDA, without PTX: bf16 bits to f32, the 128 x 128
// byte transposes through shared memory, the warp scan and the expert tables built with it,
// the chained GEMM's gate test. Apart from mx_ptx.cuh
// (which includes it after its types) so that the host tests (tests/host/simt.hpp) can compile
// the kernels that use them. NVRTC-clean.
#pragma once

MX_DEV float bf16_bits_to_f32(mx_u32 b16) { return __int_as_float((int)(b16 << 16)); }

// ---- 128 x 128 byte transposes through shared memory (mx_transpose_u8's word path) ----
// sm: 128 transposed rows of 32 words. A CTA of 256 threads, thread (warp, lane) holding the
// words of block rows 16 warp + i at bytes 4 lane .. 4 lane + 3, calls mx_t128_put for
// i = 4 blk .. 4 blk + 3: byte q of the four words becomes one word of transposed row
// 4 lane + q, stored at a swizzled word so that a warp's stores and mx_t128_get's 16-byte loads
// meet no bank conflicts. Used by mx_reencode_pair.cuh and mx_reencode_block.cuh.
MX_DEV void mx_t128_put(mx_u32* sm, int warp, int lane, int blk, mx_u32 w0, mx_u32 w1, mx_u32 w2, mx_u32 w3) {
  const int g = lane & 7, h = (lane >> 3) & 3;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const mx_u32 sel = (mx_u32)q | ((mx_u32)(q + 4) << 4);
    sm[(4 * lane + q) * 32 + 4 * (warp ^ g) + (blk ^ h)] =
        __byte_perm(__byte_perm(w0, w1, sel), __byte_perm(w2, w3, sel), 0x5410);
  }
}
// After a __syncthreads: 16-byte chunk j (block rows 16 j .. 16 j + 15) of transposed row c.
MX_DEV uint4 mx_t128_get(const mx_u32* sm, int c, int j) {
  const int hc = (c >> 5) & 3;
  uint4 v = *reinterpret_cast<const uint4*>(&sm[c * 32 + 4 * (j ^ ((c >> 2) & 7))]);
  if (hc & 1) { const mx_u32 x = v.x; v.x = v.y; v.y = x; const mx_u32 z = v.z; v.z = v.w; v.w = z; }
  if (hc & 2) { const mx_u32 x = v.x; v.x = v.z; v.z = x; const mx_u32 y = v.y; v.y = v.w; v.w = y; }
  return v;
}

// ---- warp-level scan used by the expert schedulers ----
// Inclusive prefix sum of v over the warp.
MX_DEV int warp_incl_scan(int v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    int t = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += t;
  }
  return v;
}

// Max number of experts the on-chip schedulers handle (smem tables of MX_MAX_E+1 ints).
#ifndef MX_MAX_E
#define MX_MAX_E 1024
#endif

// Called by one full warp. From offs (cumulative END offsets, E entries) writes
//   start[e] = offs[e-1] (start[0]=0) for e in 0..E   (start[E] = offs[E-1])
//   pre[e]   = sum_{i<e} ceil_div(m_i, unit) * mult     for e in 0..E
// i.e. pre[] is an exclusive prefix of per-expert counts rounded up to `unit`.
MX_DEV void warp_group_tables(const int* __restrict__ offs, int E, int unit, int mult,
                              int* start, int* pre) {
  const int lane = threadIdx.x & 31;
  int carry = 0;
  for (int base = 0; base < E; base += 32) {
    int e = base + lane;
    int m = 0, st = 0;
    if (e < E) {
      int end = offs[e];
      st = e > 0 ? offs[e - 1] : 0;
      m = end - st;
      if (m < 0) m = 0;
    }
    int cnt = ((m + unit - 1) / unit) * mult;
    int incl = warp_incl_scan(cnt);
    if (e < E) { pre[e] = carry + incl - cnt; start[e] = st; }
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) {
    pre[E] = carry;
    start[E] = E > 0 ? offs[E - 1] : 0;
  }
}

// Largest e in [0, E) with pre[e] <= x (pre non-decreasing, pre[0] = 0).
MX_DEV int upper_idx(const int* pre, int E, int x) {
  int lo = 0, hi = E - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (pre[mid] <= x) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// ---- the chained GEMM's gate (src/backend/cuda/chain.rs) ----
// gate: the re-encoding's status words {flags, residual count}. The chained GEMM whose builds
// take counts in [limit_lo, limit] computes the output iff no flag is set and the count is in
// that range; the per-k32 kernel enqueued beside it (and the scale tables only it reads) runs
// iff not, so the host never waits. Here in the base header because the quantizer unit's
// table kernels ask it too.
MX_DEV bool mx_chain_took(const int* gate, int limit, int limit_lo) {
  const mx_u32 n = (mx_u32)gate[1];
  return gate[0] == 0 && n <= (mx_u32)limit && n >= (mx_u32)limit_lo;
}
