// mx_chain_gemm.cu — the chained MXFP8 grouped GEMM for sm_90a and the re-encoding it needs:
//   mx_reencode_<fmt>: an MX operand -> stage-uniform copy + residual lists (mx_reencode.cuh);
//   mx_reencode_pair_e4m3 + mx_chain_lists_e4m3: both forms of a weight and its transposed copy
//   from one read (mx_reencode_pair.cuh);
//   mx_reencode_block_<fmt> (+ mx_chain_lists_<fmt>): an A operand's form and its transposed copy
//   from one read (mx_reencode_block.cuh); mx_quantize_rows_form_<fmt>: bf16 rows to the MX
//   tensor and that form in one pass (mx_quant_block_form.cuh; _form_wv_<fmt> also writes
//   wgrad's X fake-quantized along rows; given a need map, the transposed copy only where the
//   chained GEMM reads it); mx_chain_need_map: that map from a weight's residual lists
//   (mx_chain_need.cuh);
//   mx_cgemm_<A fmt><B fmt>_w2d_<bf16|f32>: the 256 x 128 chained GEMM on the copies, with the
//   residual corrections gathered into shared memory and added before its epilogue
//   (mx_tgemm_chain.cuh).
// How the backend runs them as one forward/dgrad (src/backend/cuda/chain.rs, MXHOST_MX_CHAIN):
// re-encode A and B (status words zeroed first; or read both from the annexes their quantizers
// filled, ABI 1.3), transpose A' and its scales, relay the copies' scales (mx_scales_to_f32),
// merge the two operands' status words (mx_chain_status_merge), then enqueue this GEMM and the per-k32 kernel on the original
// operands, all gated on the status words (MxGemmTmaParams::gate): exactly one of them runs,
// the 4-stage build at low residual counts, the `_s3` build (larger correction rounds) above
// them, the per-k32 one when a row overflowed its list, a block is non-finite or the residuals
// exceed the limit (docs/perf.md run 106). Checked end to end by bench/chain.py and
// `mxhost selftest` (MXHOST_MX_CHAIN=on|always).
#include "mx_ptx.cuh"
#include "mx_numerics.cuh"
#include "mx_wgmma.cuh"
#include "mx_gemm_common.cuh"
#include "mx_tgemm_pipeline.cuh"
#include "mx_tgemm_mainloop.cuh"
#include "mx_tgemm_roles.cuh"
#include "mx_fp8_shift.cuh"
#include "mx_reencode.cuh"
#include "mx_quant_blocks.cuh"   // (mx_reencode_pair.cuh's bf16 source too)
#include "mx_reencode_pair.cuh"
#include "mx_reencode_block.cuh"
#include "mx_quant_chain.cuh"
#include "mx_quant_values.cuh"
#include "mx_fakequant.cuh"
#include "mx_quant_block_form.cuh"
#include "mx_chain_need.cuh"
#include "mx_plain_from_form.cuh"
#include "mx_tgemm_chain.cuh"
#include "mx_chain_status.cuh"

// The launchers (bench/launch.cu and bench/chain.py's ctypes structures; the backend's, when it
// is wired) hard-code these sizes.
static_assert(sizeof(MxReencodeParams) == 104 && sizeof(MxChainFix) == 128, "RP / FIX in bench/chain.py, src/backend/cuda/params.rs");
static_assert(sizeof(MxGemmChainParams) == 768 && mxc_smem_bytes<4, true>() == 228944 && mxc_smem_bytes<3, true, true>() == 228736,
              "ChainParams in src/backend/cuda/params.rs, chain_smem in device.rs");
static_assert(sizeof(MxReencodePairParams) == 104 && sizeof(MxChainListParams) == 104 && sizeof(MxQuantPairParams) == 136,
              "ReencodePairParams, ChainListParams, QuantPairParams in src/backend/cuda/params.rs");
static_assert(sizeof(MxQuantChainParams) == 96 && sizeof(MxReencodeBlockParams) == 72 && sizeof(MxQuantBlockFormParams) == 128 &&
              sizeof(MxNeedMapParams) == 48,
              "QuantChainParams, ReencodeBlockParams, QuantBlockFormParams, NeedMapParams in src/backend/cuda/params.rs");
static_assert(mxt8_smem_bytes() == 218112, "the v8c variant in bench/launch.cu");
// the dynamic shared memory beside the kernel's 3 KB of static shared memory (ptxas), within sm_90's 227 KB
static_assert(mxc_smem_bytes<4, true>() + 3072 <= 232448 && mxc_smem_bytes<3, true>() + 3072 <= 232448 &&
              mxc_smem_bytes<3, true, true>() + 3072 <= 232448, "rounds too large");

#define MXR_INST(NAME, F) \
  extern "C" __global__ void __launch_bounds__(256) NAME(const __grid_constant__ MxReencodeParams p) { mx_reencode_rows<F>(p); }
// STAGES 4 (rounds of 15 units; GEMMs with no residual) or 3 (`_s3`: rounds of 82 units and the
// A' B_res corrections on the tensor cores, MXC_INST_TC; `_s3_cc` and the other harness 3-stage
// builds: 112 units, every correction on the CUDA cores); the launcher's dynamic shared memory
// is mxc_smem_bytes<STAGES, true, TCB>().
// VEPI 1: the epilogue's 16-byte stores (mxc_epilogue_v4); 0: the 4-byte ones (harness A/B, run 110).
#define MXC_INST_E(NAME, FA, FB, OBF, STAGES, POLL, VEPI) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmChainParams p) { mx_tgemm_chain_impl<FA, FB, 1, OBF, STAGES, POLL, VEPI>(p.b, &p.f); }
#define MXC_INST(NAME, FA, FB, OBF, STAGES, POLL) MXC_INST_E(NAME, FA, FB, OBF, STAGES, POLL, true)
// The 3-stage build with the A' B_res corrections on the tensor cores (mxc_apply_b_tc, run 111).
// SB2D 1: B in 32x32 tiles (forward, dgrad); 0: the chained wgrad (batched over experts, B with
// a scale per column and stage, MXC_INST_W).
#define MXC_INST_TC_SB(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmChainParams p) { \
    mx_tgemm_chain_impl<FA, FB, SB2D, OBF, 3, false, true, true>(p.b, &p.f, p.o_tma ? &p.tmO : nullptr); \
  }
#define MXC_INST_TC(NAME, FA, FB, OBF) MXC_INST_TC_SB(NAME, FA, FB, 1, OBF)
#define MXC_INST_W(NAME, FA, FB, OBF) MXC_INST_TC_SB(NAME, FA, FB, 0, OBF)

// The gate's status words of one GEMM from its operands' own (each operand re-encoded on its
// own, in the call or by its quantizer into an annex), and their copy for the gate memory when
// `host` is not null (mx_chain_status.cuh).
extern "C" __global__ void mx_chain_status_merge(const int* a, const int* b, int* out, int* host) {
  if (threadIdx.x == 0 && blockIdx.x == 0) mx_chain_status_words(a, b, out, host);
}

// A weight and its transposed copy with both chain forms (mx_reencode_pair.cuh; E4M3 only, as
// the chained GEMM's B operand).
extern "C" __global__ void __launch_bounds__(256) mx_reencode_pair_e4m3(const __grid_constant__ MxReencodePairParams p) {
  mx_reencode_pair<0, true>(p);
}
// The same for annexes that refer to their partner's bytes (ABI 1.4): no copies written.
// (NVRTC gives it 51 registers, 4 CTAs per SM; held to 48 for five, ptxas spills 8 bytes, which
// the NVRTC gate refuses in a hot kernel.)
extern "C" __global__ void __launch_bounds__(256) mx_reencode_pair_ref_e4m3(const __grid_constant__ MxReencodePairParams p) {
  mx_reencode_pair<0, false>(p);
}
// Both from bf16 in one pass: W quantized in 32x32 tiles (with its transposed copy) and both forms
// (MXHOST_MX_CHAIN_QPAIR=1, src/backend/cuda/chain_pair.rs).
extern "C" __global__ void __launch_bounds__(256) mx_quantize_pair_bf16_e4m3(const __grid_constant__ MxQuantPairParams p) {
  mx_reencode_pair<0, true, 1>(p.f, &p.src);
}
// The same, leaving W's and Wᵀ's bytes out where their forms give them back (NOQ: plugin ABI 1.7's
// bytes on demand, src/backend/cuda/bytes_on_demand.rs).
extern "C" __global__ void __launch_bounds__(256) mx_quantize_pair_bf16_noq_e4m3(const __grid_constant__ MxQuantPairParams p) {
  mx_reencode_pair<0, true, 1, 1>(p.f, &p.src);
}
// (8 CTAs per SM: launch_lists sizes its grid for one wave of 8; the row queue took ptxas to 40 registers)
extern "C" __global__ void __launch_bounds__(256, 8) mx_chain_lists_e4m3(const __grid_constant__ MxChainListParams p) {
  mx_chain_lists<0>(p);
}
extern "C" __global__ void __launch_bounds__(256, 8) mx_chain_lists_e5m2(const __grid_constant__ MxChainListParams p) {
  mx_chain_lists<1>(p);
}
// An A operand (X, dY) with its transposed copy (mx_reencode_block.cuh; both formats, as the
// chained GEMM's A operand).
extern "C" __global__ void __launch_bounds__(256) mx_reencode_block_e4m3(const __grid_constant__ MxReencodeBlockParams p) {
  mx_reencode_block<0>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_reencode_block_e5m2(const __grid_constant__ MxReencodeBlockParams p) {
  mx_reencode_block<1>(p);
}
// bf16 X or dY to the MX tensor and its form in one pass (mx_quant_block_form.cuh).
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form_e4m3(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<0>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form_e5m2(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<1>(p);
}
// The same plus wv, X fake-quantized in 32x1 blocks along rows for wgrad (what mx_fakequant_m32
// writes; mx_quant_block_form.cuh WV).
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form_wv_e4m3(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<0, 1, 1>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form_wv_e5m2(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<1, 1, 1>(p);
}
// Both without the MX bytes the chain form gives back (mx_quant_block_form.cuh NOQ), and the
// kernel that writes those bytes when someone reads them (mx_plain_from_form.cuh).
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form_noq_e4m3(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<0, 1, 0, 1>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form_noq_e5m2(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<1, 1, 0, 1>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form_wv_noq_e4m3(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<0, 1, 1, 1>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form_wv_noq_e5m2(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<1, 1, 1, 1>(p);
}
// The WV NOQ build walking its row block's column blocks with the next one's loads in flight
// (MXHOST_MX_FORM_PREFETCH=1, mx_quant_block_form.cuh PF): 2 CTAs per SM (the next block's 32
// words of input live beside the current one's).
extern "C" __global__ void __launch_bounds__(256, 2) mx_quantize_rows_form_wv_noq_pf_e4m3(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<0, 1, 1, 1, 1>(p);
}
extern "C" __global__ void __launch_bounds__(256, 2) mx_quantize_rows_form_wv_noq_pf_e5m2(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<1, 1, 1, 1, 1>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_plain_from_form_e4m3(const __grid_constant__ MxPlainFromFormParams p) {
  mx_plain_from_form<0>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_plain_from_form_e5m2(const __grid_constant__ MxPlainFromFormParams p) {
  mx_plain_from_form<1>(p);
}
// The same, four 128-column blocks per CTA (MXHOST_MX_CHAIN_FORM4=1, mx_quant_block_form.cuh BPC).
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form4_e4m3(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<0, 4>(p);
}
extern "C" __global__ void __launch_bounds__(256) mx_quantize_rows_form4_e5m2(const __grid_constant__ MxQuantBlockFormParams p) {
  mx_quant_block_form<1, 4>(p);
}
// Which columns of X's or dY's transposed copy the chained GEMM reads, per expert, from the
// partner weight's B residual lists: the form kernels' need map (mx_chain_need.cuh).
extern "C" __global__ void __launch_bounds__(256) mx_chain_need_map(const __grid_constant__ MxNeedMapParams p) {
  mx_chain_need_map<>(p);
}

#define MXQC_INST(NAME, F) \
  extern "C" __global__ void __launch_bounds__(256) NAME(const __grid_constant__ MxQuantChainParams p) { mx_quant_chain_rows<F>(p); }

// MXHOST_MX_CHAIN_VERIFY (src/backend/cuda/chain_form.rs): adds to *count the bytes where a and
// b differ, and the residual records of rows r < rows among their first cnt[r] that differ.
extern "C" __global__ void __launch_bounds__(256) mx_bytes_diff(const mx_u8* a, const mx_u8* b, mx_i64 n,
                                                                unsigned long long* count) {
  unsigned long long d = 0;
  for (mx_i64 i = (mx_i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (mx_i64)gridDim.x * blockDim.x)
    d += a[i] != b[i];
  if (d) atomicAdd(count, d);
}
extern "C" __global__ void __launch_bounds__(256) mx_chain_res_diff(const MxRes* a, const MxRes* b, const int* cnt,
                                                                    mx_i64 rows, int slots, unsigned long long* count) {
  unsigned long long d = 0;
  for (mx_i64 r = (mx_i64)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (mx_i64)gridDim.x * blockDim.x)
    for (int i = 0; i < cnt[r]; ++i) {
      const MxRes x = a[r * slots + i], y = b[r * slots + i];
      d += x.k != y.k || __float_as_uint(x.v) != __float_as_uint(y.v);
    }
  if (d) atomicAdd(count, d);
}

#ifndef MXC_CUSTOM_INSTANTIATIONS
MXR_INST(mx_reencode_e4m3, 0)
MXR_INST(mx_reencode_e5m2, 1)
MXQC_INST(mx_quantize_rows_chain_e4m3, 0)
MXQC_INST(mx_quantize_rows_chain_e5m2, 1)
MXC_INST(mx_cgemm_e4m3e4m3_w2d_bf16, 0, 0, 1, 4, false)
MXC_INST(mx_cgemm_e4m3e4m3_w2d_f32, 0, 0, 0, 4, false)
MXC_INST(mx_cgemm_e5m2e4m3_w2d_bf16, 1, 0, 1, 4, false)
MXC_INST_TC(mx_cgemm_e4m3e4m3_w2d_bf16_s3, 0, 0, 1)
MXC_INST_TC(mx_cgemm_e4m3e4m3_w2d_f32_s3, 0, 0, 0)
MXC_INST_W(mx_cgemm_w_e4m3e4m3_bf16_s3, 0, 0, 1)
MXC_INST_W(mx_cgemm_w_e4m3e4m3_f32_s3, 0, 0, 0)
#ifdef MXC_HARNESS_VARIANTS   // bench/launch.cu: the polling builds (run 103)
MXC_INST(mx_cgemm_e4m3e4m3_w2d_bf16_poll, 0, 0, 1, 4, true)
MXC_INST(mx_cgemm_e4m3e4m3_w2d_bf16_s3_poll, 0, 0, 1, 3, true)
MXC_INST(mx_cgemm_e4m3e4m3_w2d_f32_poll, 0, 0, 0, 4, true)
MXC_INST(mx_cgemm_e4m3e4m3_w2d_f32_s3_poll, 0, 0, 0, 3, true)
// the 4-byte-store epilogue of runs 94-109 (run 110's A/B)
MXC_INST_E(mx_cgemm_e4m3e4m3_w2d_bf16_sepi, 0, 0, 1, 4, false, false)
MXC_INST_E(mx_cgemm_e4m3e4m3_w2d_bf16_s3_sepi, 0, 0, 1, 3, false, false)
MXC_INST_E(mx_cgemm_e4m3e4m3_w2d_f32_s3_sepi, 0, 0, 0, 3, false, false)
// the 3-stage build with every correction on the CUDA cores (runs 100-110; run 111's A/B)
MXC_INST(mx_cgemm_e4m3e4m3_w2d_bf16_s3_cc, 0, 0, 1, 3, false)
MXC_INST(mx_cgemm_e4m3e4m3_w2d_f32_s3_cc, 0, 0, 0, 3, false)
#endif
#endif
