// mx_dequantize.cu — helper kernels of the plugin's CUDA backend (host wiring, not the
// tuned kernels): MX dequantization for every ABI block layout, and a batched byte
// transpose used to move MX data/scales between [R][C] and [C][R] layouts.
// Self-contained (no headers), NVRTC-clean; compiled for sm_90a next to mx_quantize.cu, or
// for the device's compute_XY in the portable build (kernels.rs), where the FP8 conversions
// that need sm_89 fall back to the reference decode.

typedef unsigned char      mxd_u8;
typedef unsigned short     mxd_u16;
typedef unsigned int       mxd_u32;
typedef long long          mxd_i64;

// 2^k for k in the normal FP32 range, exactly.
__device__ __forceinline__ float mxd_pow2(int k) { return __int_as_float((k + 127) << 23); }

// One FP8 byte to FP32, exactly (E4M3 "FN": S.1111.111 is NaN, no Inf; E5M2: IEEE-like).
__device__ __forceinline__ float mxd_fp8_to_f32(mxd_u32 b, int fmt) {
  const mxd_u32 m7 = b & 0x7Fu;
  float v;
  if (fmt == 0) {
    if (m7 == 0x7Fu) return __int_as_float(0x7FC00000);
    const int e = (int)(m7 >> 3), m = (int)(m7 & 7u);
    v = e ? (float)(8 + m) * mxd_pow2(e - 10) : (float)m * mxd_pow2(-9);
  } else {
    const int e = (int)(m7 >> 2), m = (int)(m7 & 3u);
    if (e == 31) return m ? __int_as_float(0x7FC00000) : ((b & 0x80u) ? __int_as_float(0xFF800000) : __int_as_float(0x7F800000));
    v = e ? (float)(4 + m) * mxd_pow2(e - 17) : (float)m * mxd_pow2(-16);
  }
  return (b & 0x80u) ? -v : v;
}

// E8M0 to FP32: 0xFF NaN, 0 = 2^-127 (subnormal), else 2^(b-127).
__device__ __forceinline__ float mxd_e8m0(mxd_u32 b) {
  if (b == 0xFFu) return __int_as_float(0x7FC00000);
  if (b == 0u) return __int_as_float(0x00400000);
  return __int_as_float((int)(b << 23));
}

__device__ __forceinline__ mxd_u16 mxd_bf16_rne(float f) {
  mxd_u32 u = (mxd_u32)__float_as_int(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (mxd_u16)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (mxd_u16)(u >> 16);
}

// out[b][r][c] = fp8(q[b][r][c]) * e8m0(s[b*sbs + (r/rdiv)*srs + (c/cdiv)*scs]) for r<R, c<C.
// Layouts: 1x32 along C: rdiv 1, cdiv 32, srs ceil(C/32), scs 1; 1x32 along R: rdiv 32,
// cdiv 1, srs C, scs 1; 32x32: rdiv 32, cdiv 32, srs ceil(C/32), scs 1. scs != 1: scales
// stored with the other axis inner (the portable GEMM's weights, cuda/bf16_path.rs gemm_rows_bf16).
// grid: x = ceil(R*C/256), y = batch.
extern "C" __global__ void __launch_bounds__(256) mx_dequantize(
    const mxd_u8* __restrict__ q, const mxd_u8* __restrict__ s, void* __restrict__ out,
    int out_bf16, int fmt, mxd_i64 R, mxd_i64 C, int rdiv, int cdiv, mxd_i64 srs, mxd_i64 sbs,
    mxd_i64 scs) {
  const mxd_i64 n = R * C;
  const mxd_i64 b = blockIdx.y;
  for (mxd_i64 i = (mxd_i64)blockIdx.x * 256 + threadIdx.x; i < n; i += (mxd_i64)gridDim.x * 256) {
    const mxd_i64 r = i / C, c = i - r * C;
    const float v = mxd_fp8_to_f32(q[b * n + i], fmt) * mxd_e8m0(s[b * sbs + (r / rdiv) * srs + (c / cdiv) * scs]);
    if (out_bf16) reinterpret_cast<mxd_u16*>(out)[b * n + i] = mxd_bf16_rne(v);
    else reinterpret_cast<float*>(out)[b * n + i] = v;
  }
}

// Batched byte transpose: out[b][c][r] = in[b][r][c] for r<R, c<C.
// block 256, grid (ceil(C/128), ceil(R/128), batch): one 128 x 128 tile per CTA.
// Word path (interior tiles when R % 16 == 0, C % 4 == 0 and both bases are 16-byte
// aligned): warp w reads rows 16w..16w+15 of the tile as 4-byte words (lane = word column,
// so each load is 128 contiguous bytes of one row), transposes each 4 x 4 byte block in
// registers (PRMT), and stores the words column-major into shared memory; the reads back are
// 16-byte chunks of output rows (8 lanes = 128 contiguous output bytes). The one-byte-per-
// thread version moved weights at ~1 TB/s (docs/perf.md run 52).
// Shared layout of the word path: word (c, rw) of the tile (column c, rows 4rw..4rw+3) sits at
// c * 32 + 4 * ((rw >> 2) ^ ((c >> 2) & 7)) + ((rw & 3) ^ ((c >> 5) & 3)): the 16-byte chunk
// index and the word within it are XOR-swizzled so that the 32 lanes of a store (columns
// 4 * lane + q, the same rw) hit 32 distinct banks and the 8 lanes of a 16-byte read (one
// column, chunks 0..7) hit distinct chunks. Edge tiles take the byte path.
extern "C" __global__ void __launch_bounds__(256) mx_transpose_u8(
    const mxd_u8* __restrict__ in, mxd_u8* __restrict__ out, int R, int C) {
  __shared__ __align__(16) mxd_u32 sm[128 * 33];   // word path: 128 x 32 words; byte path: [128][129] bytes
  const mxd_i64 n = (mxd_i64)R * C;
  const mxd_u8* src = in + (mxd_i64)blockIdx.z * n;
  mxd_u8* dst = out + (mxd_i64)blockIdx.z * n;
  const int c0 = blockIdx.x * 128, r0 = blockIdx.y * 128;
  const int t = threadIdx.x;
  const bool words = (R & 15) == 0 && (C & 3) == 0 &&
                     (((unsigned long long)in | (unsigned long long)out) & 15) == 0 &&
                     r0 + 128 <= R && c0 + 128 <= C;
  if (words) {
    const int lane = t & 31, warp = t >> 5;
    mxd_u32 w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i)
      w[i] = *reinterpret_cast<const mxd_u32*>(src + (mxd_i64)(r0 + 16 * warp + i) * C + c0 + 4 * lane);
    const int g = lane & 7, h = (lane >> 3) & 3;   // the swizzle of columns 4 * lane + q
#pragma unroll
    for (int blk = 0; blk < 4; ++blk) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        // byte q of rows 4blk..4blk+3 -> one word, row order low to high
        const mxd_u32 sel = (mxd_u32)q | ((mxd_u32)(q + 4) << 4);
        const mxd_u32 lo = __byte_perm(w[4 * blk + 0], w[4 * blk + 1], sel);
        const mxd_u32 hi = __byte_perm(w[4 * blk + 2], w[4 * blk + 3], sel);
        sm[(4 * lane + q) * 32 + 4 * (warp ^ g) + (blk ^ h)] = __byte_perm(lo, hi, 0x5410);
      }
    }
    __syncthreads();
    const int j = t & 7;   // 16-byte chunk of the output row: tile rows 16j..16j+15
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int c = (t >> 3) + 32 * k;
      const int hc = (c >> 5) & 3;
      uint4 v = *reinterpret_cast<const uint4*>(&sm[c * 32 + 4 * (j ^ ((c >> 2) & 7))]);
      if (hc & 1) { const mxd_u32 x = v.x; v.x = v.y; v.y = x; const mxd_u32 z = v.z; v.z = v.w; v.w = z; }
      if (hc & 2) { const mxd_u32 x = v.x; v.x = v.z; v.z = x; const mxd_u32 y = v.y; v.y = v.w; v.w = y; }
      *reinterpret_cast<uint4*>(dst + (mxd_i64)(c0 + c) * R + r0 + 16 * j) = v;
    }
    return;
  }
  mxd_u8* tb = reinterpret_cast<mxd_u8*>(sm);
  for (int i = t; i < 128 * 128; i += 256) {
    const int rr = i >> 7, cc = i & 127, r = r0 + rr, c = c0 + cc;
    if (r < R && c < C) tb[rr * 129 + cc] = src[(mxd_i64)r * C + c];
  }
  __syncthreads();
  for (int i = t; i < 128 * 128; i += 256) {
    const int cc = i >> 7, rr = i & 127, r = r0 + rr, c = c0 + cc;
    if (r < R && c < C) dst[(mxd_i64)c * R + r] = tb[rr * 129 + cc];
  }
}

// wgrad on pre-quantized operands: a [R][P] MX tensor with 1x32 blocks along R, quantized
// globally (blocks start at row 0, not at each expert), moved into the GEMM's padded
// transposed layout qt [P][Mpad], st [P][Mpad/32]. Expert e (rows start_e .. start_e+m_e)
// goes to padded columns seg_e + shift_e + j with shift_e = start_e % 32, so every padded
// 32-block holds rows of exactly one global 32-row block and keeps its scale exactly.
// (The GEMM is then given offsets with m_e + shift_e rows per expert: the shifted-in
// rows are zeros.) Blocks with no row of the expert get scale 127 (1.0) and zero data.
// tbl: [E][4] = {seg_e, shift_e, start_e, m_e} (device), seg_e ascending multiples of 128.
// grid: x = Mpad/32, y = ceil(P/32); block (32, 8).
extern "C" __global__ void __launch_bounds__(256) mx_wgrad_relayout(
    const mxd_u8* __restrict__ q, const mxd_u8* __restrict__ s, int P,
    const int* __restrict__ tbl, int E, mxd_u8* __restrict__ qt, mxd_u8* __restrict__ st, int mpad) {
  __shared__ mxd_u8 tile[32][33];
  const int t0 = blockIdx.x * 32, p0 = blockIdx.y * 32;
  int lo = 0, hi = E - 1;  // largest e with seg_e <= t0
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tbl[4 * mid] <= t0) lo = mid; else hi = mid - 1;
  }
  const int seg = tbl[4 * lo], sh = tbl[4 * lo + 1], st0 = tbl[4 * lo + 2], m = tbl[4 * lo + 3];
  for (int jj = threadIdx.y; jj < 32; jj += 8) {
    const int j = t0 + jj - seg - sh;
    const int p = p0 + threadIdx.x;
    tile[jj][threadIdx.x] = (j >= 0 && j < m && p < P) ? q[(mxd_i64)(st0 + j) * P + p] : (mxd_u8)0;
  }
  __syncthreads();
  for (int jj = threadIdx.y; jj < 32; jj += 8) {
    const int p = p0 + jj;
    if (p < P) qt[(mxd_i64)p * mpad + t0 + threadIdx.x] = tile[threadIdx.x][jj];
  }
  if (threadIdx.y == 0) {
    const int p = p0 + threadIdx.x;
    if (p < P) {
      const int j0 = t0 - seg - sh;
      const int a = j0 > 0 ? j0 : 0, b = (j0 + 32 < m) ? j0 + 32 : m;
      st[(mxd_i64)p * (mpad / 32) + blockIdx.x] = a < b ? s[(mxd_i64)((st0 + a) / 32) * P + p] : (mxd_u8)127;
    }
  }
}


// The same expansion for batch 1, C % 16 == 0, 16-byte-aligned q/s/out, cdiv 1 or 32
// (1x32 along R, 32x32 tiles, 1x32 along C): 16 consecutive elements of a row per thread
// and row (a 16-byte load of q, one or sixteen scale bytes, 32-byte bf16 / 64-byte f32
// stores). Block 128; grid x = ceil(C/16/128) chunk columns, grid y = any value >= 1: CTA
// (x, y) takes rows y, y + gridDim.y, ..., MXD_U of them per round with all their loads
// issued before any is converted. Row and column come from the grid, not from a division
// per chunk (the run-32 kernel divided a flat index by the row length, twice per chunk,
// and ran at 70-73 % of copy; with 8-element chunks, twice as many divisions, 56-59 %).
// Fast path (per chunk, same bits as the reference path): no element byte is a NaN/Inf
// code and every scale byte is in [THR, 253] (bf16 output: the value is then a normal
// FP32 with <= 4 significant bits, +-0 or +-Inf, so truncation to bf16 is exact) or in
// [1, 254] (f32 output; byte 0 is the subnormal 2^-127): FP8 -> f16x2 by the hardware
// conversion (exact) -> f32, times the scale. Otherwise the reference decode
// (mxd_fp8_to_f32, mxd_e8m0, mxd_bf16_rne). The software decode of every element ran at
// ~1.9 TB/s (run 31: wgrad's two operands of shape a, 805 MB, in ~425 us).
#ifndef MXD_U
#define MXD_U 2
#endif
__device__ __forceinline__ void mxd_fp8x2_to_f32(mxd_u32 q2, int fmt, float& lo, float& hi) {
#if __CUDA_ARCH__ >= 890
  mxd_u32 h2;
  const mxd_u16 q16 = (mxd_u16)q2;
  if (fmt == 0) asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(q16));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h2) : "h"(q16));
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}\n" : "=f"(lo), "=f"(hi) : "r"(h2));
#else  // portable build (no FP8 conversion before sm_89): the reference decode, exact too
  lo = mxd_fp8_to_f32(q2 & 0xFFu, fmt);
  hi = mxd_fp8_to_f32((q2 >> 8) & 0xFFu, fmt);
#endif
}
// Whether any byte of w is a NaN/Inf element code (E4M3: x111 1111; E5M2: x111 11xx).
__device__ __forceinline__ bool mxd_has_special(mxd_u32 w, int fmt) {
  const mxd_u32 m = fmt == 0 ? 0x7F7F7F7Fu : 0x7C7C7C7Cu;
  return __vcmpeq4(w & m, m) != 0u;
}
extern "C" __global__ void __launch_bounds__(128) mx_dequantize16(
    const mxd_u8* __restrict__ q, const mxd_u8* __restrict__ s, void* __restrict__ out,
    int out_bf16, int fmt, mxd_i64 R, mxd_i64 C, int rdiv, int cdiv, mxd_i64 srs) {
  const mxd_i64 c0 = ((mxd_i64)blockIdx.x * 128 + threadIdx.x) << 4;
  if (c0 >= C) return;
  const int rsh = rdiv == 32 ? 5 : 0;  // r / rdiv
  const mxd_i64 sc0 = cdiv == 32 ? (c0 >> 5) : c0;
  // smallest scale byte whose product with the smallest FP8 subnormal is a normal FP32
  const mxd_u32 thr = fmt == 0 ? 10u : 17u;
  const mxd_u32 lo_b = (out_bf16 ? thr : 1u) * 0x01010101u, hi_b = (out_bf16 ? 253u : 254u) * 0x01010101u;
  const mxd_i64 ystep = gridDim.y;
  for (mxd_i64 r0 = blockIdx.y; r0 < R; r0 += MXD_U * ystep) {
    mxd_u32 words[MXD_U][4], sw[MXD_U][4];
#pragma unroll
    for (int u = 0; u < MXD_U; ++u) {
      const mxd_i64 r = r0 + u * ystep;
      if (r >= R) break;
      const uint4 w = *reinterpret_cast<const uint4*>(q + r * C + c0);
      words[u][0] = w.x; words[u][1] = w.y; words[u][2] = w.z; words[u][3] = w.w;
      const mxd_u8* sp = s + (r >> rsh) * srs + sc0;
      if (cdiv == 1) {  // one scale per column, 16 consecutive bytes (srs = C, 16-byte aligned rows)
        const uint4 t = *reinterpret_cast<const uint4*>(sp);
        sw[u][0] = t.x; sw[u][1] = t.y; sw[u][2] = t.z; sw[u][3] = t.w;
      } else {          // cdiv 32: the 16 elements share one scale (c0 is a multiple of 16)
        const mxd_u32 b = *sp;
        sw[u][0] = sw[u][1] = sw[u][2] = sw[u][3] = b * 0x01010101u;
      }
    }
#pragma unroll
    for (int u = 0; u < MXD_U; ++u) {
      const mxd_i64 r = r0 + u * ystep;
      if (r >= R) break;
      bool fast = true;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        fast &= !mxd_has_special(words[u][k], fmt);
        fast &= (__vcmpgeu4(sw[u][k], lo_b) & __vcmpleu4(sw[u][k], hi_b)) == 0xFFFFFFFFu;
      }
      float v[16];
      if (fast) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const mxd_u32 wq = words[u][k >> 1] >> (16 * (k & 1));
          const mxd_u32 ws = sw[u][k >> 1] >> (16 * (k & 1));
          float a, b;
          mxd_fp8x2_to_f32(wq, fmt, a, b);
          v[2 * k] = a * __int_as_float((int)((ws & 0xFFu) << 23));
          v[2 * k + 1] = b * __int_as_float((int)(((ws >> 8) & 0xFFu) << 23));
        }
      } else {
#pragma unroll
        for (int k = 0; k < 16; ++k) {
          const mxd_u32 b = (words[u][k >> 2] >> (8 * (k & 3))) & 0xFFu;
          const float sc = mxd_e8m0((sw[u][k >> 2] >> (8 * (k & 3))) & 0xFFu);
          v[k] = mxd_fp8_to_f32(b, fmt) * sc;
        }
      }
      if (out_bf16) {
        mxd_u32 o[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
          o[k] = fast ? __byte_perm((mxd_u32)__float_as_int(v[2 * k]), (mxd_u32)__float_as_int(v[2 * k + 1]), 0x7632)
                      : (mxd_u32)mxd_bf16_rne(v[2 * k]) | ((mxd_u32)mxd_bf16_rne(v[2 * k + 1]) << 16);
        uint4* dst = reinterpret_cast<uint4*>(reinterpret_cast<mxd_u16*>(out) + r * C + c0);
        dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
        dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
      } else {
        float4* dst = reinterpret_cast<float4*>(reinterpret_cast<float*>(out) + r * C + c0);
#pragma unroll
        for (int k = 0; k < 4; ++k) dst[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
      }
    }
  }
}
