// mx_reencode.cuh — exact re-encoding of an MX operand to one scale per 128-deep stage, for
// the chained GEMM (mx_tgemm_chain.cuh), which promotes once per stage instead of per k32 block.
//
// A row's four 1x32 blocks of a stage (k in [128 s, 128 s + 128)) move to the stage's largest
// scale S: an element P of a block with scale byte b becomes P * 2^(b - S) in the same FP8
// format when that value is exactly representable (A'), else 0 in A' and the element's exact
// MX value goes to the row's residual list (A_res). Then A = A' + A_res element by element,
// and A B = A' B' + A' B_res + A_res B exactly (only the summation order changes); the
// chained GEMM computes the first term on the tensor cores and adds the other two from the
// lists in its epilogue. The elements that move to the lists are the tiny ones of a
// smaller-scale block (below 2^(d - 6) in E4M3 after a shift by d binades): 4e-6 - 3.4e-4
// of the elements on Gaussian and Student-t(3) data (docs/perf.md run 93).
//
// The lists are fixed slots per row (`slots`, chosen by the host): no scan, one pass. A row that needs more
// sets bit MX_RES_OVERFLOW of status[0], a stage with a NaN/Inf block (scale byte 0xFF) sets
// MX_RES_NONFINITE; either sends the GEMM to the per-k32 kernel on the original operand.
// status[1] counts the residuals listed (the gate's other input: many make the chained GEMM
// slower than the per-k32 kernel; MxGemmTmaParams::gate). The host zeroes both words first.
// Scales of an operand in 32x32 tiles are the same for the tile's 32 rows, so S is too, and
// the rows of a tile compute the same scale bytes (written by the tile's first row).
// CPU reference: src/numerics/reencode.rs (its tests run this file's shift rule on every byte).
// Requires mx_ptx.cuh, mx_numerics.cuh and mx_fp8_shift.cuh. NVRTC-clean.
#pragma once

#define MX_RES_OVERFLOW 1
#define MX_RES_NONFINITE 2
#define MX_RES_UNALIGNED 4   // set by the host: a B annex's partner bytes are not 16-byte aligned (ABI 1.4)

// One residual element: its index along the reduction and its exact MX value.
struct MxRes { int k; float v; };

// Row r of the operand: bytes q[r * K + k]; scale byte s[e * ise + (n / rdv) * isc + kb * isr]
// with e = r / rpe, n = r % rpe (1x32 rows: rpe = rows, rdv = 1; 32x32 tiles: rdv = 32;
// a weight [E][cols][red]: rpe = cols). q2 / s2 have q / s's layouts.
struct MxReencodeParams {
  const mx_u8* q; const mx_u8* s;
  mx_u8* q2; mx_u8* s2;
  MxRes* res; int* cnt; int* status;   // res[r * slots + i], i < cnt[r]; status[2]
  mx_i64 R; mx_i64 ise, isr, isc;
  int K, rpe, rdv, slots;
};

// One warp per row, grid-stride; per step the warp covers 512 bytes (four stages), 16 per lane,
// so a stage is eight lanes and its largest scale byte three xor-shuffles away. The residuals
// are listed in k order (a warp prefix over the lanes), so the epilogue's sums are deterministic.
template <int FMT>
MX_DEV void mx_reencode_rows(const MxReencodeParams& p) {
  const int lane = threadIdx.x & 31;
  const mx_i64 nw = (mx_i64)gridDim.x * (blockDim.x >> 5);
  __shared__ int listed;   // this block's residuals: one atomic per block on status[1]
  if (threadIdx.x == 0) listed = 0;
  __syncthreads();
  for (mx_i64 r = (mx_i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < p.R; r += nw) {
    const mx_i64 e = r / p.rpe;
    const int n = (int)(r - e * p.rpe);
    const mx_i64 sb = e * p.ise + (mx_i64)(n / p.rdv) * p.isc;
    const bool own_scales = (n % p.rdv) == 0;
    const mx_u8* qr = p.q + r * p.K;
    mx_u8* q2r = p.q2 + r * p.K;
    MxRes* rr = p.res + r * p.slots;
    int run = 0, bad = 0;
    for (int c0 = 0; c0 < p.K; c0 += 512) {
      const int k = c0 + 16 * lane;
      const bool valid = k < p.K;
      const int kb = k >> 5;
      const mx_u32 sc = valid ? p.s[sb + kb * p.isr] : 0u;
      mx_u32 S = sc;
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 1));
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 2));
      S = max(S, (mx_u32)__shfl_xor_sync(0xffffffffu, (int)S, 4));
      if (S == 0xFFu) bad |= MX_RES_NONFINITE;
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (valid) x = *reinterpret_cast<const uint4*>(qr + k);
      mx_u32 w[4] = {x.x, x.y, x.z, x.w}, w2[4];
      mx_u32 miss = 0;   // bit i: byte i is a residual
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        mx_u32 mi;
        w2[i] = mx_fp8_shift4<FMT>(w[i], S - sc, mi);
        miss |= mi << (4 * i);
      }
      const int nm = __popc(miss);
      const int incl = warp_incl_scan(nm);
      const int total = __shfl_sync(0xffffffffu, incl, 31);
      if (run + total > p.slots) {
        bad |= MX_RES_OVERFLOW;
      } else if (nm) {
        const float scale = mx_e8m0_to_f32(sc);
        int slot = run + incl - nm;
        for (mx_u32 m = miss; m; m &= m - 1) {
          const int i = __ffs((int)m) - 1;
          const mx_u32 wi = (i & 8) ? ((i & 4) ? w[3] : w[2]) : ((i & 4) ? w[1] : w[0]);   // no local array
          const mx_u32 b = (wi >> (8 * (i & 3))) & 0xFFu;
          rr[slot++] = MxRes{k + i, mx_fp8_value<FMT>(b) * scale};
        }
      }
      run = min(run + total, p.slots + 1);
      if (valid) {
        *reinterpret_cast<uint4*>(q2r + k) = make_uint4(w2[0], w2[1], w2[2], w2[3]);
        if (own_scales && (lane & 1) == 0) p.s2[sb + kb * p.isr] = (mx_u8)S;
      }
    }
    bad = __reduce_or_sync(0xffffffffu, bad);
    if (lane == 0) {
      p.cnt[r] = run > p.slots ? 0 : run;
      if (bad) atomicOr(p.status, bad);
      if (run > 0 && run <= p.slots) atomicAdd(&listed, run);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && listed) atomicAdd(p.status + 1, listed);
}
