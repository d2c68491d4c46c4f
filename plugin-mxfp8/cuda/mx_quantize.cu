// mx_quantize.cu — the MX quantization kernels the backend compiles (one NVRTC unit): each
// `extern "C"` kernel below instantiates a kernel body from include/ (which file: its
// #include). Tiled (1x32 rows, 32x1 columns written transposed and group-aware, 32x32
// tiles with an optional transposed copy), flat 1x32 rows, fake quantizers, 1x32 rows with
// wgrad's fake-quantized values, and the E8M0 -> FP32 scale relayout the GEMM consumes.
// NVRTC-clean; see README.md for launch rules.
#include "mx_ptx.cuh"
#include "mx_numerics.cuh"
#include "mx_quant_blocks.cuh"
#include "mx_quant_tile.cuh"

#define MXQ_INST(NAME, BF, F, AS) \
  extern "C" __global__ void __launch_bounds__(256, (BF) ? 4 : 3) NAME(const MxQuantParams p) { mx_quant_tile<BF, F, AS>(p); }
MXQ_INST(mx_quantize_f32_e4m3, 0, 0, 0)
MXQ_INST(mx_quantize_bf16_e4m3, 1, 0, MXQ_ASYNC_STAGES)
MXQ_INST(mx_quantize_f32_e5m2, 0, 1, 0)
MXQ_INST(mx_quantize_bf16_e5m2, 1, 1, MXQ_ASYNC_STAGES)
// 32x32 tiles from bf16 rows through a TMA ring (see mx_quant_tile32), 3 slots; the t32l
// kernels (LT = 1) take ungrouped launches with a transposed copy, in row groups of 4 tiles
// (grid y counts groups). Two kernels, not one: the tile loop inside the LT kernel ran 6 %
// slower without a transposed copy (run 87).
#define MXQ_INST_T32(NAME, F, LT) \
  extern "C" __global__ void __launch_bounds__(256, 4) NAME(const __grid_constant__ MxQuantTmaParams p) { mx_quant_tile32<F, MXQ_ASYNC_STAGES, LT>(p); }
// TMA and the transaction-count mbarrier need sm_90: a portable build (devices other than
// Hopper, kernels.rs) has no mx_quantize_t32_* and the backend never asks for them there.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
MXQ_INST_T32(mx_quantize_t32_bf16_e4m3, 0, 0)
MXQ_INST_T32(mx_quantize_t32_bf16_e5m2, 1, 0)
MXQ_INST_T32(mx_quantize_t32l_bf16_e4m3, 0, 1)
MXQ_INST_T32(mx_quantize_t32l_bf16_e5m2, 1, 1)
#endif

#include "mx_quant_values.cuh"
#include "mx_quant_flat.cuh"

// The grid is at most MXQF_CTAS_PER_SM CTAs per SM, all resident at once (launch bounds):
// a grid larger than what fits ran a second partial wave of CTAs that each did a full
// share of the grid-stride loop (run 28: 8 CTAs/SM, 5 resident, 80 % vs 83 % of copy).
#define MXQF_INST(NAME, BF, F, U, CS, PF) \
  extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) NAME(const MxQuantFlatParams p) { mx_quant_flat<BF, F, U, CS, PF>(p); }
MXQF_INST(mx_quantize_rows_f32_e4m3, 0, 0, MXQF_U, 0, 0)
MXQF_INST(mx_quantize_rows_bf16_e4m3, 1, 0, MXQF_U, 0, 0)
MXQF_INST(mx_quantize_rows_f32_e5m2, 0, 1, MXQF_U, 0, 0)
MXQF_INST(mx_quantize_rows_bf16_e5m2, 1, 1, MXQF_U, 0, 0)
// Fake quantization along rows (the dequantize-to-BF16 forward/dgrad path with a dense
// operand): the same blocks and bytes as mx_quantize_rows_*, written as their MX values in
// bf16 at p.q (nblocks * 32 bf16; p.s unused, may be null), bit-identical to
// mx_quantize_rows_* followed by mx_dequantize with bf16 output. One pass instead of two.
#define MXQFF_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) NAME(const MxQuantFlatParams p) { mx_quant_flat<BF, F, MXQF_U, 0, 0, 1>(p); }
MXQFF_INST(mx_fakequant_rows_f32_e4m3, 0, 0)
MXQFF_INST(mx_fakequant_rows_bf16_e4m3, 1, 0)
MXQFF_INST(mx_fakequant_rows_f32_e5m2, 0, 1)
MXQFF_INST(mx_fakequant_rows_bf16_e5m2, 1, 1)
#define MXQFV_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(256, MXQF_CTAS_PER_SM) NAME(const MxQuantFlatValsParams p) { mx_quant_flat<BF, F, MXQF_U, 0, 0, 2>(p.p, p.vals); }
MXQFV_INST(mx_quantize_rows_vals_f32_e4m3, 0, 0)
MXQFV_INST(mx_quantize_rows_vals_bf16_e4m3, 1, 0)
MXQFV_INST(mx_quantize_rows_vals_f32_e5m2, 0, 1)
MXQFV_INST(mx_quantize_rows_vals_bf16_e5m2, 1, 1)

// E8M0 bytes -> FP32 scale tables for the per-k32 GEMMs (mx_scale_tables.cuh: layouts, gate).
#include "mx_scale_tables.cuh"
extern "C" __global__ void __launch_bounds__(256) mx_scales_to_f32(
    const mx_u8* __restrict__ in, mx_i64 ise, mx_i64 isr, mx_i64 isc,
    float* __restrict__ out, mx_i64 ose, mx_i64 osr, mx_i64 ocg, int R, int C, int Rp, int Cp, int rdv,
    const int* __restrict__ gate, int limit) {
  mx_scales_to_f32_body(in, ise, isr, isc, out, ose, osr, ocg, R, C, Rp, Cp, rdv, gate, limit);
}
extern "C" __global__ void __launch_bounds__(256) mx_scales_to_f32_stages(
    const mx_u8* __restrict__ in, mx_i64 ise, mx_i64 isr, mx_i64 isc,
    float* __restrict__ out, mx_i64 ose, int R, int C, int Rp, int Cp, int rdv,
    const int* __restrict__ gate, int limit) {
  mx_scales_to_f32_stages_body(in, ise, isr, isc, out, ose, R, C, Rp, Cp, rdv, gate, limit);
}

#include "mx_fakequant.cuh"

#define MXFQ_INST(NAME, BF, F) \
  extern "C" __global__ void __launch_bounds__(128, (BF) ? 8 : 6) NAME(const MxFakeQuantParams p) { mx_fakequant_m32<BF, F>(p); }
MXFQ_INST(mx_fakequant_m32_f32_e4m3, 0, 0)
MXFQ_INST(mx_fakequant_m32_bf16_e4m3, 1, 0)
MXFQ_INST(mx_fakequant_m32_f32_e5m2, 0, 1)
MXFQ_INST(mx_fakequant_m32_bf16_e5m2, 1, 1)

// 1x32 rows (mx_quantize_rows_*'s q, s) and the 32x1 fake-quantized values mx_fakequant_m32_*
// writes for wgrad, from one read of bf16 X (mx_quant_rows_wv.cuh; C % 32 == 0, 16-byte aligned).
#include "mx_quant_rows_wv.cuh"
static_assert(sizeof(MxQuantRowsWvParams) == 48, "QuantRowsWvParams in src/backend/cuda/params.rs");
#define MXQW_INST(NAME, F) \
  extern "C" __global__ void __launch_bounds__(128, 8) NAME(const MxQuantRowsWvParams p) { mx_quant_rows_wv<F>(p); }
MXQW_INST(mx_quantize_rows_wv_bf16_e4m3, 0)
MXQW_INST(mx_quantize_rows_wv_bf16_e5m2, 1)
// The same with the row blocks' MX values in bf16 too (quantize with kept values and wgrad
// values in one call: a forward or dgrad on cuBLAS reads them without expanding the bytes).
static_assert(sizeof(MxQuantRowsValsWvParams) == 56, "QuantRowsValsWvParams in src/backend/cuda/wgrad_values.rs");
#define MXQVW_INST(NAME, F) \
  extern "C" __global__ void __launch_bounds__(128, 8) NAME(const MxQuantRowsValsWvParams p) { mx_quant_rows_wv<F, 1>(p.p, p.vals); }
MXQVW_INST(mx_quantize_rows_vals_wv_bf16_e4m3, 0)
MXQVW_INST(mx_quantize_rows_vals_wv_bf16_e5m2, 1)
