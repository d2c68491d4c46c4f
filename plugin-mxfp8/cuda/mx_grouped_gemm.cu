// mx_grouped_gemm.cu — MXFP8 grouped GEMM for sm_90a (Hopper), exact MX semantics:
//   out[r, n] = sum_kb  SA[r, kb] * SB[kb, n] * sum_{k in block kb} A[r, k] * B[n, k]
// Each k32 block is one FP8 wgmma (m64n128k32) whose FP32 result is promoted into FP32
// registers with its block scales ("promotion"), so every MX block keeps its own scale.
//
// One kernel serves the three passes of a grouped linear layer (see README.md):
//   grouped rows (forward, dgrad): expert e owns rows offs[e-1]..offs[e] of A/out;
//   batched K segments (wgrad): expert e contracts over K = m_e elements starting at the
//   expert's 128-aligned segment in the transposed, zero-padded operands.
// Structure: persistent CTAs; warpgroup NC = producer (cp.async, zero-fill masking, one
// mbarrier per stage), warpgroups 0..NC-1 = consumers (m64 x n128 each). K is consumed in
// straight-line groups of 8 (or 4) k32 steps that drain at their end (no wgmma in flight
// across a loop back-edge, so ptxas keeps them asynchronous); each step is two m64n64k32
// wgmmas into two alternating 32-register buffers, so the promotion of one overlaps the
// next wgmma.
// Files: include/mx_gemm_common.cuh (parameters, tile decode, promotion),
// mx_gemm_cpasync.cuh (mx_gemm_*), mx_tgemm_pipeline.cuh, mx_tgemm_mainloop.cuh,
// mx_tgemm_roles.cuh, mx_tgemm_kernels.cuh (mx_tgemm_*); this file instantiates them.
#include "mx_ptx.cuh"
#include "mx_wgmma.cuh"
#include "mx_gemm_common.cuh"
#include "mx_gemm_cpasync.cuh"
#include "mx_tgemm_pipeline.cuh"
#include "mx_tgemm_mainloop.cuh"
#include "mx_tgemm_roles.cuh"
#include "mx_tgemm_kernels.cuh"

// mx_tgemm_<...>_v2*: the v2 main loop (see mxt_group_v2 / mx_tgemm_v2_impl) with the OPT
// bits MXT_OPT_*. Same launch and parameters as the corresponding mx_tgemm_* kernel.
#define MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, OPT) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_v2_impl<FA, FB, SB2D, OBF, ST, 1, OPT>(p); }
// v2: plain; v2u: warp-uniform warpgroup index (the backend's f32-output 32x32 kernel);
// v2d: stepped descriptors; v2p: the stage's scales preloaded; v2o: warpgroup 1's groups
// skewed by two k32 steps; v2n / v2e: DIAGNOSTICS with wrong results (no promotion / no
// output stores), for bench/power.py.
#define MXT_INST_V2(NAME, FA, FB, SB2D, OBF, ST)  MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, 0)
#define MXT_INST_V2U(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG)
#define MXT_INST_V2D(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_DINC)
#define MXT_INST_V2P(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_PRESCALE)
#define MXT_INST_V2O(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_SKEW)
#define MXT_INST_V2N(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_NO_PROMOTE)
#define MXT_INST_V2E(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_V2_OPT(NAME, FA, FB, SB2D, OBF, ST, MXT_OPT_UWG | MXT_OPT_NO_STORE)

// mx_tgemm_<...>_v2t: v2u with the TMA-store epilogue (MXT_OPT_TMA_STORE); parameters
// MxGemmTmaParamsO, 384 threads, mxt_v2t_smem_bytes<SB2D>() of dynamic shared memory.
#define MXT_V2T_STAGES 5
template <int SB2D> constexpr int mxt_v2t_smem_bytes() { return MXT_V2T_STAGES * MxtLayout<SB2D>::STAGE + 2 * 16384 + 1024; }
// The backend's side of this contract (plugin-mxfp8/src/backend/cuda/device.rs: tgemm_smem,
// TGemmParamsO) hard-codes these numbers; NVRTC compiles this file in CI, so a change here
// that forgets the Rust side fails there instead of on a GPU.
static_assert(mxt_v2t_smem_bytes<1>() == 212992, "tgemm_smem(w2d, tma_store) in src/backend/cuda/device.rs");
// (tmO then sits at 448 and o_tma at 576, as src/backend/cuda/params.rs asserts; NVRTC has no offsetof.)
static_assert(sizeof(MxGemmTmaParams) == 448 && alignof(MxTmap) == 64 && sizeof(MxGemmTmaParamsO) == 640,
              "TGemmParams / TGemmParamsO in src/backend/cuda/params.rs");
#define MXT_INST_V2T(NAME, FA, FB, SB2D, OBF) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParamsO p) { \
    mx_tgemm_v2_impl<FA, FB, SB2D, OBF, MXT_V2T_STAGES, 1, MXT_OPT_UWG | MXT_OPT_TMA_STORE>(p.b, p.o_tma ? &p.tmO : nullptr); }

// mx_tgemm_<...>_v3: the v2 main loop with two stages (8 k32 steps) per straight-line group;
// bitwise-identical results to v2. Same launch and parameters as the mx_tgemm_* kernel.
#define MXT_INST_V3(NAME, FA, FB, SB2D, OBF, ST) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_v2_impl<FA, FB, SB2D, OBF, ST, 2>(p); }

#define MXT_INST_M(NAME, FA, FB, SB2D, OBF, ST, MODE) \
  extern "C" __global__ void __launch_bounds__(MXT_THREADS, 1) \
  NAME(const __grid_constant__ MxGemmTmaParams p) { mx_tgemm_impl<FA, FB, SB2D, OBF, ST, MODE>(p); }
#ifndef MXT_MODE
#define MXT_MODE 0
#endif
#define MXT_INST(NAME, FA, FB, SB2D, OBF, ST) MXT_INST_M(NAME, FA, FB, SB2D, OBF, ST, MXT_MODE)

// Instantiations: mx_gemm_<A fmt><B fmt>_<w2d|w1d>_<bf16|f32>[_bm64]
#define MXG_INST(NAME, NC, FA, FB, SB2D, OBF, ST) \
  extern "C" __global__ void __launch_bounds__(128 * (NC + 1), (NC == 1 ? 2 : 1)) \
  NAME(const __grid_constant__ MxGemmParams p) { mx_grouped_gemm_impl<NC, FA, FB, SB2D, OBF, ST>(p); }

#ifndef MXG_CUSTOM_INSTANTIATIONS
MXG_INST(mx_gemm_e4m3e4m3_w2d_bf16, 2, 0, 0, 1, 1, 5)
MXG_INST(mx_gemm_e4m3e4m3_w2d_f32,  2, 0, 0, 1, 0, 5)
MXG_INST(mx_gemm_e4m3e4m3_w1d_bf16, 2, 0, 0, 0, 1, 5)
MXG_INST(mx_gemm_e4m3e4m3_w1d_f32,  2, 0, 0, 0, 0, 5)
MXG_INST(mx_gemm_e5m2e4m3_w2d_bf16, 2, 1, 0, 1, 1, 5)
MXG_INST(mx_gemm_e5m2e4m3_w1d_bf16, 2, 1, 0, 0, 1, 5)
MXG_INST(mx_gemm_e5m2e5m2_w2d_f32,  2, 1, 1, 1, 0, 5)
MXG_INST(mx_gemm_e4m3e4m3_w2d_bf16_bm64, 1, 0, 0, 1, 1, 3)
#endif

#ifndef MXG_CUSTOM_INSTANTIATIONS
MXT_INST(mx_tgemm_e4m3e4m3_w2d_bf16, 0, 0, 1, 1, 6)
MXT_INST(mx_tgemm_e4m3e4m3_w2d_f32,  0, 0, 1, 0, 6)
MXT_INST(mx_tgemm_e4m3e4m3_w1d_bf16, 0, 0, 0, 1, 6)
MXT_INST(mx_tgemm_e4m3e4m3_w1d_f32,  0, 0, 0, 0, 6)
MXT_INST(mx_tgemm_e5m2e4m3_w2d_bf16, 1, 0, 1, 1, 6)
MXT_INST(mx_tgemm_e5m2e4m3_w1d_bf16, 1, 0, 0, 1, 6)
MXT_INST(mx_tgemm_e5m2e5m2_w2d_f32,  1, 1, 1, 0, 6)
#endif
