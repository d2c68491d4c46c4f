// mx_scale_tables.cuh — E8M0 scale bytes to the FP32 tables the per-k32 GEMM kernels read
// (mx_scales_to_f32, mx_scales_to_f32_stages in mx_quantize.cu). Apart from the unit so that
// tests/scale_tables_host.rs can run them on the host. Needs mx_numerics.cuh and mx_warp.cuh
// (mx_chain_took); no PTX.
#pragma once

// E8M0 bytes -> FP32 scale table for the GEMM, with relayout and zero padding:
//   out[e*ose + (c/4)*ocg + r*osr + c%4] = (r < R && c < C) ? 2^(in[e*ise + (r/rdv)*isr + c*isc] - 127) : 0
// for r < Rp, c < Cp (Cp a multiple of 4). rdv = 32 expands an A operand quantized in 32x32
// tiles (scales [R/32][C]) into the per-row table the GEMM reads; otherwise 1. Row-major: ocg = 4; the GEMM's A-scale table
// is "stage-major": osr = 4, ocg = 4*Rp (the plugin makes that one with mx_scales_to_f32_stages
// below; the harness, bench/launch.cu, still uses this kernel for both).
// grid: x = ceil(Rp*Cp/256), y = batch; block 256.
// gate (null: none): a table that only the per-k32 kernel beside a chained GEMM reads is not
// written when the chained GEMM takes the output (mx_chain_took over [0, limit], the per-k32
// kernel's own test): 12-27 us per chained forward or dgrad on shapes a-c (run 136).
MX_DEV void mx_scales_to_f32_body(
    const mx_u8* __restrict__ in, mx_i64 ise, mx_i64 isr, mx_i64 isc,
    float* __restrict__ out, mx_i64 ose, mx_i64 osr, mx_i64 ocg, int R, int C, int Rp, int Cp, int rdv,
    const int* __restrict__ gate, int limit) {
  if (gate != nullptr && mx_chain_took(gate, limit, 0)) return;
  mx_i64 i = (mx_i64)blockIdx.x * 256 + threadIdx.x;
  if (i >= (mx_i64)Rp * Cp) return;
  int r = (int)(i / Cp), c = (int)(i % Cp);
  int e = blockIdx.y;
  float v = 0.f;
  if (r < R && c < C) v = mx_e8m0_to_f32(in[e * ise + (mx_i64)(r / rdv) * isr + c * isc]);
  out[e * ose + (mx_i64)(c >> 2) * ocg + r * osr + (c & 3)] = v;
}

// The same table in the GEMM's stage-major A layout (osr = 4, ocg = 4*Rp). A CTA converts a
// 32-row x 128-column tile into shared memory (a warp's loads are one row's consecutive scale
// bytes), then writes it as float4s along the rows: a warp stores 512 contiguous bytes. The
// kernel above gives each float a thread, so a warp's stores land in 8 pieces of 16 bytes Rp*16
// bytes apart (run 121: 23 us for shape a's 16.8 MB table, 0.7 TB/s); a thread per float4 that
// reads its 4 bytes from its own row takes as long (run 122: 32 rows' lines per load).
//   out[e*ose + g*4*Rp + 4*r + q] = (r < R && 4g+q < C) ? 2^(in[e*ise + (r/rdv)*isr + (4g+q)*isc] - 127) : 0
// grid: x = ceil(Rp/32), y = ceil(Cp/128), z = batch; block 256. Cp % 4 == 0; out 16-byte aligned.
// gate, limit: as mx_scales_to_f32's.
MX_DEV void mx_scales_to_f32_stages_body(
    const mx_u8* __restrict__ in, mx_i64 ise, mx_i64 isr, mx_i64 isc,
    float* __restrict__ out, mx_i64 ose, int R, int C, int Rp, int Cp, int rdv,
    const int* __restrict__ gate, int limit) {
  if (gate != nullptr && mx_chain_took(gate, limit, 0)) return;
  __shared__ float tile[32][129];
  const int r0 = blockIdx.x * 32, c0 = blockIdx.y * 128;
  const mx_i64 e = blockIdx.z;
  {   // a thread keeps its column; its rows step by 2 (run 123: a division and two 64-bit
      // products per byte made this phase issue-bound, 16.6 us on shape a)
    const int cc = threadIdx.x & 127, c = c0 + cc;
    const mx_u8* src = in + e * ise + (mx_i64)c * isc;
    const bool c_ok = c < C;
#pragma unroll 4
    for (int rr = threadIdx.x >> 7; rr < 32; rr += 2) {
      const int r = r0 + rr;
      const int rs = rdv == 1 ? r : r / rdv;
      tile[rr][cc] = (c_ok && r < R) ? mx_e8m0_to_f32(src[(mx_i64)rs * isr]) : 0.f;
    }
  }
  __syncthreads();
  const int rr = threadIdx.x & 31, r = r0 + rr;
  if (r >= Rp) return;
  float* dst = out + e * ose + (mx_i64)r * 4;
#pragma unroll
  for (int g = threadIdx.x >> 5; g < 32; g += 8) {
    const int c = c0 + 4 * g;
    if (c < Cp)
      *reinterpret_cast<float4*>(dst + (mx_i64)(c >> 2) * 4 * Rp) =
          make_float4(tile[rr][4 * g], tile[rr][4 * g + 1], tile[rr][4 * g + 2], tile[rr][4 * g + 3]);
  }
}
