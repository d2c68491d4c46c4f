// Thin host-side launcher for the benchmark only (nvcc -shared). The plugin itself
// compiles ../mx_quantize.cu and ../mx_grouped_gemm.cu with NVRTC and launches them
// through the driver API with the same rules (see ../README.md).
#include <cuda_runtime.h>
#include <cuda.h>
#include <cstring>
#include <cstdio>
#define MXQ_INSTANTIATE_LEGACY  // run-7 quantizer, mx_quantize_*_legacy (A/B timing only)
#define MXQF_INSTANTIATE_VARIANTS  // flat 1x32 quantizer variants (u8, cs, u8cs; e4m3 only)
#define MXQT_INSTANTIATE  // warp-per-block 32x32 quantizer mx_quantize_tiles_* (variant 6)
#define MXQ_INSTANTIATE_SYNC  // bf16 tiled quantizer without its cp.async ring (7) / 2 slots (8)
#include "../mx_quantize.cu"
#include "mx_quantize_variants.cuh"  // the harness-only quantizer variants the defines above name
#define MXT_INSTANTIATE_V2   // v2 (run 8): mx_tgemm_e4m3e4m3_{w2d,w1d}_{bf16,f32}_v2
#define MXT_INSTANTIATE_V3   // v3: v2 with 8 k32 steps per group: mx_tgemm_e4m3e4m3_{w2d,w1d}_{bf16,f32}_v3
#define MXT_INSTANTIATE_V4   // v4: two independent 64-row rings: mx_tgemm_e4m3e4m3_w2d_{bf16,f32}_v4
#define MXT_INSTANTIATE_V5   // v5: 128 x 192 tiles: mx_tgemm_e4m3e4m3_w2d_{bf16,f32}_v5
#define MXT_INSTANTIATE_V7   // v7: v2t's CTA in a 2-CTA cluster, two 128-row tiles sharing B: mx_tgemm_e4m3e4m3_w2d_{bf16,f32}_v7t
#define MXT_INSTANTIATE_V6   // v6: v4's rings + a 2-CTA cluster sharing B: mx_tgemm_e4m3e4m3_w2d_{bf16,f32}_v6{,t}
#include "../mx_grouped_gemm.cu"
#define MXC_HARNESS_VARIANTS
#include "../mx_chain_gemm.cu"  // mx_reencode_*, mx_cgemm_* (the chained GEMM; mx_launch_reencode / mx_launch_cgemm below)
#include "mx_gemm_variants.cuh"  // the harness-only GEMM variants and opt-in lists the defines above name
#include "../mx_dequantize.cu"  // mx_dequantize: reference for the fake-quant check
// Experimental main-loop variants (MODE 1: three partial buffers, two wgmmas in flight).
MXT_INST_M(mx_tgemm_e4m3e4m3_w2d_bf16_m1, 0, 0, 1, 1, 6, 1)
MXT_INST_M(mx_tgemm_e4m3e4m3_w2d_f32_m1,  0, 0, 1, 0, 6, 1)
MXT_INST_M(mx_tgemm_e4m3e4m3_w1d_bf16_m1, 0, 0, 0, 1, 6, 1)
MXT_INST_M(mx_tgemm_e4m3e4m3_w1d_f32_m1,  0, 0, 0, 0, 6, 1)
// MODE 3: one m64n128k32 per k32 step, single in-place buffer, wait<0> then promote.
MXT_INST_M(mx_tgemm_e4m3e4m3_w2d_bf16_m3, 0, 0, 1, 1, 6, 3)
MXT_INST_M(mx_tgemm_e4m3e4m3_w2d_f32_m3,  0, 0, 1, 0, 6, 3)
MXT_INST_M(mx_tgemm_e4m3e4m3_w1d_bf16_m3, 0, 0, 0, 1, 6, 3)
MXT_INST_M(mx_tgemm_e4m3e4m3_w1d_f32_m3,  0, 0, 0, 0, 6, 3)

typedef void (*QuantK)(const MxQuantParams);
typedef void (*GemmK)(const MxGemmParams);

static int num_sms() {
  static int sms = 0;
  if (!sms) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  }
  return sms;
}

// Host rule for the quantizer's grid y (mx_quantize.cu, "Launch contract"); `tiles` = T.
// Same formula as `fn quant` in plugin-mxfp8/src/backend/cuda/quantize.rs.
// ring: the kernel's 32x32 loop reads through the cp.async ring (bf16 input, variants 0, 8).
extern "C" int mx_quant_grid_y(int tiles, int gx, int gz, int sms, int flags, int ring) {
  const int tpc = (flags & (MXQ_TILE | MXQ_TILE_T)) && !ring ? 2 : MXQ_TILES_PER_CTA;
  long long by_tpc = (tiles + tpc - 1) / tpc;
  long long fill = (16LL * sms + (long long)gx * gz - 1) / ((long long)gx * gz);
  long long gy = by_tpc > (fill < tiles ? fill : tiles) ? by_tpc : (fill < tiles ? fill : tiles);
  return (int)(gy < 1 ? 1 : gy);
}

typedef void (*QuantFlatK)(const MxQuantFlatParams);

// Host rule for the flat 1x32 quantizer's grid (mx_quantize.cu; same as `fn quant_rows` in
// the Rust backend): one round of U chunks per thread, at most ctas_per_sm CTAs per SM.
// The fewest rounds the cap allows, then the fewest CTAs doing them (every CTA the same
// number of rounds); ctas_per_sm < 0: the plain cap (run 28/29 rule) for A/B.
extern "C" int mx_quant_flat_grid(long long nblocks, int in_bf16, int u, int ctas_per_sm, int sms) {
  const long long nchunks = nblocks * (in_bf16 ? 4 : 8);
  const long long per_round = 256LL * u;
  const long long cap = (long long)(ctas_per_sm < 0 ? -ctas_per_sm : ctas_per_sm) * sms;
  long long g = (nchunks + per_round - 1) / per_round;
  if (ctas_per_sm < 0) {
    if (g > cap) g = cap;
  } else {
    long long rounds = (nchunks + per_round * cap - 1) / (per_round * cap);
    if (rounds < 1) rounds = 1;
    g = (nchunks + per_round * rounds - 1) / (per_round * rounds);
  }
  return (int)(g < 1 ? 1 : g);
}

// variants 2..5: the flat 1x32 kernel (ROWS only, C % 32 == 0, contiguous batches):
// 2 = mx_quantize_rows_* (the backend's), 3 = u8 (8 loads in flight), 4 = cs (streaming
// hints), 5 = u8cs, 9 = pf (next round's loads issued before this one is computed);
// 3..5 and 9 exist for e4m3 only. tpc 0: MXQF_CTAS_PER_SM CTAs per SM at most,
// tpc > 0: tpc CTAs per SM at most (more than fit at once run a second partial wave).
static int launch_quant_flat(int variant, int in_bf16, int fmt, const MxQuantParams* p, int gz, int tpc, void* stream) {
  if (p->flags != MXQ_ROWS || (p->C & 31) != 0 || (variant > 2 && variant != 12 && fmt != 0)) return 1;
  if (variant == 17 && !in_bf16) return 1;
  if (gz > 1 && (p->in_bs != (long long)p->R * p->C || p->qa_bs != (long long)p->R * p->C || p->sa_bs != (long long)p->R * p->C / 32))
    return 1;
  MxQuantFlatParams f;
  f.in = p->in; f.q = p->qa; f.s = p->sa; f.mode = p->mode;
  f.nblocks = (long long)gz * p->R * (p->C / 32);
  if (f.nblocks == 0) return 0;
  QuantFlatK k;
  int u = MXQF_U;
  switch (variant) {
    case 3: k = in_bf16 ? mx_quantize_rows_u8_bf16_e4m3 : mx_quantize_rows_u8_f32_e4m3; u = 8; break;
    case 4: k = in_bf16 ? mx_quantize_rows_cs_bf16_e4m3 : mx_quantize_rows_cs_f32_e4m3; break;
    case 5: k = in_bf16 ? mx_quantize_rows_u8cs_bf16_e4m3 : mx_quantize_rows_u8cs_f32_e4m3; u = 8; break;
    case 9: k = in_bf16 ? mx_quantize_rows_pf_bf16_e4m3 : mx_quantize_rows_pf_f32_e4m3; break;
    // bulk-copy-fed (mx_quant_flat_bulk): a round is one 8 KB slab = 512 chunks (u = 2)
    case 12: k = in_bf16 ? (fmt ? mx_quantize_rows_bulk_bf16_e5m2 : mx_quantize_rows_bulk_bf16_e4m3)
                         : (fmt ? mx_quantize_rows_bulk_f32_e5m2 : mx_quantize_rows_bulk_f32_e4m3); u = 2; break;
    case 13: k = in_bf16 ? mx_quantize_rows_bulk3_bf16_e4m3 : mx_quantize_rows_bulk3_f32_e4m3; u = 2; break;
    case 14: k = in_bf16 ? mx_quantize_rows_bulk5_bf16_e4m3 : mx_quantize_rows_bulk5_f32_e4m3; u = 2; break;
    case 15: k = in_bf16 ? mx_quantize_rows_nosc_bf16_e4m3 : mx_quantize_rows_nosc_f32_e4m3; break;    // diagnostic: no scales
    case 16: k = in_bf16 ? mx_quantize_rows_plain_bf16_e4m3 : mx_quantize_rows_plain_f32_e4m3; break;
    case 17: k = mx_quantize_rows_pairs_bf16_e4m3; break;  // 2 pairs (4 chunks) per thread and round: u stays 4
    default:
      k = in_bf16 ? (fmt ? mx_quantize_rows_bf16_e5m2 : mx_quantize_rows_bf16_e4m3)
                  : (fmt ? mx_quantize_rows_f32_e5m2 : mx_quantize_rows_f32_e4m3);
  }
  // tpc > 0: cap tpc CTAs/SM, balanced; tpc == -1: the plain cap of MXQF_CTAS_PER_SM (A/B)
  const int cap = variant >= 12 ? MXQB_CTAS_PER_SM : MXQF_CTAS_PER_SM;
  const int g = mx_quant_flat_grid(f.nblocks, in_bf16, u, tpc > 0 ? tpc : tpc == -1 ? -cap : cap, num_sms());
  k<<<g, 256, 0, (cudaStream_t)stream>>>(f);
  return (int)cudaGetLastError();
}

typedef void (*QuantTilesK)(const MxQuantTilesParams);

// variant 6: the warp-per-block 32x32 kernel (flags TILE or TILE|TILE_T, R and C multiples
// of 32, contiguous batches); tpc 0: MXQT_CTAS_PER_SM CTAs per SM at most, tpc > 0: tpc.
static int launch_quant_tiles(int in_bf16, int fmt, const MxQuantParams* p, int gz, int tpc, void* stream) {
  if ((p->flags != MXQ_TILE && p->flags != (MXQ_TILE | MXQ_TILE_T)) || (p->R & 31) || (p->C & 31)) return 1;
  const long long rc = (long long)p->R * p->C;
  if (gz > 1 && (p->in_bs != rc || p->qa_bs != rc || p->sa_bs != rc / 1024 ||
                 ((p->flags & MXQ_TILE_T) && (p->qt_bs != rc || (p->st && p->st_bs != rc / 1024)))))
    return 1;
  if ((p->flags & MXQ_TILE_T) && (p->ldt != p->R || (p->st && p->ldst != p->R / 32))) return 1;
  MxQuantTilesParams f;
  f.in = p->in; f.qa = p->qa; f.sa = p->sa; f.mode = p->mode; f.R = p->R; f.C = p->C; f.pad_ = 0;
  f.qt = (p->flags & MXQ_TILE_T) ? p->qt : nullptr;
  f.st = (p->flags & MXQ_TILE_T) ? p->st : nullptr;
  f.nblocks = (long long)gz * (p->R / 32) * (p->C / 32);
  if (f.nblocks == 0) return 0;
  QuantTilesK k = in_bf16 ? (fmt ? mx_quantize_tiles_bf16_e5m2 : mx_quantize_tiles_bf16_e4m3)
                          : (fmt ? mx_quantize_tiles_f32_e5m2 : mx_quantize_tiles_f32_e4m3);
  long long g = (f.nblocks + 7) / 8;
  const long long cap = (long long)(tpc > 0 ? tpc : in_bf16 ? MXQT_CTAS_PER_SM : MXQT_CTAS_PER_SM_F32) * num_sms();
  if (g > cap) g = cap;
  k<<<(int)g, 256, 0, (cudaStream_t)stream>>>(f);
  return (int)cudaGetLastError();
}

static int launch_quant_t32(int in_bf16, int fmt, const MxQuantParams* p, int gx, int tiles, int gz, int tpc, void* stream, bool occ5, int lt = 0);

// variant 0: current kernels, 1: run-7 kernels (mx_quantize_*_legacy; always grid y = tiles),
// 2..5: the flat 1x32 kernels, 6: the warp-per-block 32x32 kernel (see above), 7/8: the
// current tiled kernel for bf16 input with the register prefetch / a 2-slot cp.async ring
// (f32 input: the current kernel), 10: mx_quantize_t32_* (32x32 tiles by bulk copies; bf16,
// flags within TILE | TILE_T, C % 8 == 0).
// Variants 0/1: tpc 0: host rule above; tpc > 0: grid y = ceil(tiles / tpc); tpc < 0: grid y = 1.
extern "C" int mx_launch_quantize_v(int variant, int in_bf16, int fmt, const MxQuantParams* p, int gx, int tiles, int gz,
                                    int tpc, void* stream) {
  if (variant == 6) return launch_quant_tiles(in_bf16, fmt, p, gz, tpc, stream);
  if ((variant >= 2 && variant <= 5) || variant == 9 || (variant >= 12 && variant <= 17)) return launch_quant_flat(variant, in_bf16, fmt, p, gz, tpc, stream);
  QuantK k;
  if (variant == 1)
    k = in_bf16 ? (fmt ? mx_quantize_bf16_e5m2_legacy : mx_quantize_bf16_e4m3_legacy)
                : (fmt ? mx_quantize_f32_e5m2_legacy : mx_quantize_f32_e4m3_legacy);
  else if (variant == 7 && in_bf16)
    k = fmt ? mx_quantize_bf16_e5m2_sync : mx_quantize_bf16_e4m3_sync;
  else if (variant == 8 && in_bf16)
    k = fmt ? mx_quantize_bf16_e5m2_as2 : mx_quantize_bf16_e4m3_as2;
  else if (variant == 10 || variant == 11)  // mx_quantize_t32_* (TMA ring, tile loop); 11: 5 CTAs/SM
    return launch_quant_t32(in_bf16, fmt, p, gx, tiles, gz, tpc, stream, variant == 11);
  else if (variant == 18 || variant == 19)  // mx_quantize_t32l_* (W^T as whole lines; the backend's for ungrouped TILE_T), 19: without W^T stores (diagnostic)
    return launch_quant_t32(in_bf16, fmt, p, gx, tiles, gz, tpc, stream, false, variant == 18 ? 1 : 2);
  else
    k = in_bf16 ? (fmt ? mx_quantize_bf16_e5m2 : mx_quantize_bf16_e4m3)
                : (fmt ? mx_quantize_f32_e5m2 : mx_quantize_f32_e4m3);
  if (gx == 0 || tiles == 0 || gz == 0) return 0;
  int gy = tiles;
  if (variant != 1) {
    if (tpc == 0) gy = mx_quant_grid_y(tiles, gx, gz, num_sms(), p->flags, in_bf16 && variant != 7 && MXQ_ASYNC_STAGES > 0);  // (10: the ring too)
    else if (tpc > 0) gy = (tiles + tpc - 1) / tpc;
    else gy = 1;
  }
  k<<<dim3(gx, gy, gz), 256, 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

// gy = T (tiles) of the launch contract; the grid actually launched follows the host rule.
extern "C" int mx_launch_quantize(int in_bf16, int fmt, const MxQuantParams* p, int gx, int gy, int gz, void* stream) {
  return mx_launch_quantize_v(0, in_bf16, fmt, p, gx, gy, gz, 0, stream);
}

extern "C" int mx_launch_scales_to_f32(const void* in, long long ise, long long isr, long long isc,
                                       float* out, long long ose, long long osr, long long ocg,
                                       int R, int C, int Rp, int Cp, int batch, void* stream) {
  long long n = (long long)Rp * Cp;
  if (n == 0 || batch == 0) return 0;
  mx_scales_to_f32<<<dim3((unsigned)((n + 255) / 256), batch), 256, 0, (cudaStream_t)stream>>>(
      (const mx_u8*)in, ise, isr, isc, out, ose, osr, ocg, R, C, Rp, Cp, 1, nullptr, 0);
  return (int)cudaGetLastError();
}

struct GemmVariant { const char* name; GemmK k; int nc; int sb2d; int stages; };
static GemmVariant g_variants[] = {
  {"mx_gemm_e4m3e4m3_w2d_bf16", mx_gemm_e4m3e4m3_w2d_bf16, 2, 1, 5},
  {"mx_gemm_e4m3e4m3_w2d_f32",  mx_gemm_e4m3e4m3_w2d_f32,  2, 1, 5},
  {"mx_gemm_e4m3e4m3_w1d_bf16", mx_gemm_e4m3e4m3_w1d_bf16, 2, 0, 5},
  {"mx_gemm_e4m3e4m3_w1d_f32",  mx_gemm_e4m3e4m3_w1d_f32,  2, 0, 5},
  {"mx_gemm_e5m2e4m3_w2d_bf16", mx_gemm_e5m2e4m3_w2d_bf16, 2, 1, 5},
  {"mx_gemm_e5m2e4m3_w1d_bf16", mx_gemm_e5m2e4m3_w1d_bf16, 2, 0, 5},
  {"mx_gemm_e5m2e5m2_w2d_f32",  mx_gemm_e5m2e5m2_w2d_f32,  2, 1, 5},
  {"mx_gemm_e4m3e4m3_w2d_bf16_bm64", mx_gemm_e4m3e4m3_w2d_bf16_bm64, 1, 1, 3},
};

static int smem_bytes(const GemmVariant& v) {
  int st = v.nc == 2 ? (v.sb2d ? MxgLayout<2, 1>::STAGE : MxgLayout<2, 0>::STAGE)
                     : (v.sb2d ? MxgLayout<1, 1>::STAGE : MxgLayout<1, 0>::STAGE);
  return st * v.stages;
}

// Dynamic shared memory a variant needs (bytes), or -1.
extern "C" int mx_gemm_smem(const char* name) {
  for (auto& v : g_variants) if (!strcmp(v.name, name)) return smem_bytes(v);
  return -1;
}

// grid = 0: persistent, (#SMs x CTAs per SM).
extern "C" int mx_launch_gemm(const char* name, const MxGemmParams* p, int grid, void* stream) {
  for (auto& v : g_variants) {
    if (strcmp(v.name, name)) continue;
    int smem = smem_bytes(v);
    static bool done[16] = {false};
    int idx = (int)(&v - g_variants);
    if (!done[idx]) {
      cudaError_t e = cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (e != cudaSuccess) return (int)e;
      done[idx] = true;
    }
    if (grid <= 0) {
      int dev = 0, sms = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      grid = sms * (v.nc == 1 ? 2 : 1);
    }
    v.k<<<grid, 128 * (v.nc + 1), smem, (cudaStream_t)stream>>>(*p);
    return (int)cudaGetLastError();
  }
  return -1;
}

// ---------------- mx_tgemm_* (TMA) ----------------
// Tensor maps exactly as README.md specifies (the Rust side builds the same ones).
typedef CUresult (*EncodeFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                             const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                             CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeFn g_encode = nullptr;

static int encode_2d(MxTmap* out, const void* ptr, unsigned long long inner, unsigned long long rows, unsigned long long ld,
                     unsigned box_rows = 128, int bf16 = 0, unsigned box_inner = 128, int swizzle_128b = 1) {
  if (!g_encode) {
    cudaDriverEntryPointQueryResult q;
    void* fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess || !fn) return -2;
    g_encode = (EncodeFn)fn;
  }
  cuuint64_t dims[2] = {inner, rows > 0 ? rows : 1};
  cuuint64_t strides[1] = {ld};
  cuuint32_t box[2] = {box_inner, box_rows};
  cuuint32_t es[2] = {1, 1};
  CUresult r = g_encode(reinterpret_cast<CUtensorMap*>(out), bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(ptr), dims, strides, box, es,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : -3;
}

// mx_quantize_t32_*: the input map over all batches (bf16 [gz * R][C], box 128 x 32, no
// swizzle), as the Rust backend builds it; 1 where the backend would not pick it.
typedef void (*QuantT32K)(const MxQuantTmaParams);
static int launch_quant_t32(int in_bf16, int fmt, const MxQuantParams* p, int gx, int tiles, int gz, int tpc, void* stream, bool occ5, int lt) {
  if (!in_bf16 || (p->flags & ~(MXQ_TILE | MXQ_TILE_T)) || (p->C & 7) || p->in_bs != (long long)p->R * p->C) return 1;
  if ((occ5 || lt == 2) && fmt) return 1;
  if (gx == 0 || tiles == 0 || gz == 0) return 0;
  MxQuantTmaParams tp;
  tp.p = *p;
  if (encode_2d(&tp.tm, p->in, p->C, (unsigned long long)gz * p->R, (unsigned long long)p->C * 2, 32, 1, 128, 0)) return 1;
  int gy = tiles;
  if (tpc == 0) gy = mx_quant_grid_y(tiles, gx, gz, num_sms(), p->flags, 1);
  else if (tpc > 0) gy = (tiles + tpc - 1) / tpc;
  else gy = 1;
  // lt: ungrouped TILE_T launches count row groups of 4 tiles in grid y (mx_quant_tile32)
  if (lt && p->offs == nullptr && (p->flags & MXQ_TILE_T)) gy = gy < (tiles + 3) / 4 ? gy : (tiles + 3) / 4;
  QuantT32K k = occ5 ? mx_quantize_t32o_bf16_e4m3 : fmt ? mx_quantize_t32_bf16_e5m2 : mx_quantize_t32_bf16_e4m3;
  if (lt == 1) k = fmt ? mx_quantize_t32l_bf16_e5m2 : mx_quantize_t32l_bf16_e4m3;
  if (lt == 2) k = mx_quantize_t32n_bf16_e4m3;
  k<<<dim3(gx, gy, gz), 256, 0, (cudaStream_t)stream>>>(tp);
  return (int)cudaGetLastError();
}

typedef void (*TGemmK)(const MxGemmTmaParams);
typedef void (*TGemmKO)(const MxGemmTmaParamsO);
struct TVariant { const char* name; TGemmK k; int sb2d; int stages; int abox = 128; int bbox = 128; TGemmKO ko = nullptr; int smem = 0; };  // A / B box rows (v4: A 64; v5: B 192; v6: both 64); ko: v2t/v6 (output map); smem: v6's, which also marks the 2-CTA cluster kernels
static TVariant g_tvariants[] = {
  {"mx_tgemm_e4m3e4m3_w2d_bf16", mx_tgemm_e4m3e4m3_w2d_bf16, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32",  mx_tgemm_e4m3e4m3_w2d_f32,  1, 6},
  {"mx_tgemm_e4m3e4m3_w1d_bf16", mx_tgemm_e4m3e4m3_w1d_bf16, 0, 6},
  {"mx_tgemm_e4m3e4m3_w1d_f32",  mx_tgemm_e4m3e4m3_w1d_f32,  0, 6},
  {"mx_tgemm_e5m2e4m3_w2d_bf16", mx_tgemm_e5m2e4m3_w2d_bf16, 1, 6},
  {"mx_tgemm_e5m2e4m3_w1d_bf16", mx_tgemm_e5m2e4m3_w1d_bf16, 0, 6},
  {"mx_tgemm_e5m2e5m2_w2d_f32",  mx_tgemm_e5m2e5m2_w2d_f32,  1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_m1", mx_tgemm_e4m3e4m3_w2d_bf16_m1, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32_m1",  mx_tgemm_e4m3e4m3_w2d_f32_m1,  1, 6},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_m1", mx_tgemm_e4m3e4m3_w1d_bf16_m1, 0, 6},
  {"mx_tgemm_e4m3e4m3_w1d_f32_m1",  mx_tgemm_e4m3e4m3_w1d_f32_m1,  0, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_m3", mx_tgemm_e4m3e4m3_w2d_bf16_m3, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32_m3",  mx_tgemm_e4m3e4m3_w2d_f32_m3,  1, 6},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_m3", mx_tgemm_e4m3e4m3_w1d_bf16_m3, 0, 6},
  {"mx_tgemm_e4m3e4m3_w1d_f32_m3",  mx_tgemm_e4m3e4m3_w1d_f32_m3,  0, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2", mx_tgemm_e4m3e4m3_w2d_bf16_v2, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2",  mx_tgemm_e4m3e4m3_w2d_f32_v2,  1, 6},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_v2", mx_tgemm_e4m3e4m3_w1d_bf16_v2, 0, 6},
  {"mx_tgemm_e4m3e4m3_w1d_f32_v2",  mx_tgemm_e4m3e4m3_w1d_f32_v2,  0, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2u", mx_tgemm_e4m3e4m3_w2d_bf16_v2u, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2u",  mx_tgemm_e4m3e4m3_w2d_f32_v2u,  1, 6},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_v2u", mx_tgemm_e4m3e4m3_w1d_bf16_v2u, 0, 6},
  {"mx_tgemm_e4m3e4m3_w1d_f32_v2u",  mx_tgemm_e4m3e4m3_w1d_f32_v2u,  0, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2d", mx_tgemm_e4m3e4m3_w2d_bf16_v2d, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2d",  mx_tgemm_e4m3e4m3_w2d_f32_v2d,  1, 6},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_v2d", mx_tgemm_e4m3e4m3_w1d_bf16_v2d, 0, 6},
  {"mx_tgemm_e4m3e4m3_w1d_f32_v2d",  mx_tgemm_e4m3e4m3_w1d_f32_v2d,  0, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2p", mx_tgemm_e4m3e4m3_w2d_bf16_v2p, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2p",  mx_tgemm_e4m3e4m3_w2d_f32_v2p,  1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2o", mx_tgemm_e4m3e4m3_w2d_bf16_v2o, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2o",  mx_tgemm_e4m3e4m3_w2d_f32_v2o,  1, 6},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_v2o", mx_tgemm_e4m3e4m3_w1d_bf16_v2o, 0, 6},
  {"mx_tgemm_e4m3e4m3_w1d_f32_v2o",  mx_tgemm_e4m3e4m3_w1d_f32_v2o,  0, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2n", mx_tgemm_e4m3e4m3_w2d_bf16_v2n, 1, 6},  // diagnostic: no promotion, wrong results
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2e", mx_tgemm_e4m3e4m3_w2d_bf16_v2e, 1, 6},  // diagnostic: no output stores
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2r", mx_tgemm_e4m3e4m3_w2d_bf16_v2r, 1, 6},  // diagnostic: operands resident
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2re", mx_tgemm_e4m3e4m3_w2d_bf16_v2re, 1, 6},  // diagnostic: resident, no stores
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2t", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_bf16_v2t},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2t",  nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_f32_v2t},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_v2t", nullptr, 0, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w1d_bf16_v2t},
  {"mx_tgemm_e4m3e4m3_w1d_f32_v2t",  nullptr, 0, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w1d_f32_v2t},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2w", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_bf16_v2w},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2w", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_f32_v2w},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_v2w", nullptr, 0, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w1d_bf16_v2w},
  {"mx_tgemm_e4m3e4m3_w1d_f32_v2w", nullptr, 0, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w1d_f32_v2w},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v3", mx_tgemm_e4m3e4m3_w2d_bf16_v3, 1, 6},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v3",  mx_tgemm_e4m3e4m3_w2d_f32_v3,  1, 6},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_v3", mx_tgemm_e4m3e4m3_w1d_bf16_v3, 0, 6},
  {"mx_tgemm_e4m3e4m3_w1d_f32_v3",  mx_tgemm_e4m3e4m3_w1d_f32_v3,  0, 6},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v3t", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_bf16_v3t},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v3t", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_f32_v3t},
  {"mx_tgemm_e4m3e4m3_w1d_bf16_v3t", nullptr, 0, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w1d_bf16_v3t},
  {"mx_tgemm_e4m3e4m3_w1d_f32_v3t", nullptr, 0, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w1d_f32_v3t},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2c", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_bf16_v2c},  // diagnostic: stages chained (exact for uniform scales only)
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2c", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_f32_v2c},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2rc", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_bf16_v2rc},  // diagnostic: v2c, operands resident
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v8c", mx_tgemm_e4m3e4m3_w2d_bf16_v8c, 1, MXT8_STAGES, 256},  // diagnostic: 256 x 128 tiles, chained stages
  {"mx_tgemm_e4m3e4m3_w2d_f32_v8c",  mx_tgemm_e4m3e4m3_w2d_f32_v8c,  1, MXT8_STAGES, 256},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v3c", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_bf16_v3c},  // diagnostic: two chained stages per group
  {"mx_tgemm_e4m3e4m3_w2d_f32_v3c", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_f32_v3c},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v2s", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_bf16_v2s},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v2s", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_f32_v2s},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v3s", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_bf16_v3s},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v3s", nullptr, 1, MXT_V2T_STAGES, 128, 128, mx_tgemm_e4m3e4m3_w2d_f32_v3s},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v4", mx_tgemm_e4m3e4m3_w2d_bf16_v4, 1, MXT4_STAGES, 64},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v4",  mx_tgemm_e4m3e4m3_w2d_f32_v4,  1, MXT4_STAGES, 64},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v5", mx_tgemm_e4m3e4m3_w2d_bf16_v5, 1, MXT5_STAGES, 128, 192},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v5",  mx_tgemm_e4m3e4m3_w2d_f32_v5,  1, MXT5_STAGES, 128, 192},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v6", nullptr, 1, MXT6_STAGES, 64, 64, mx_tgemm_e4m3e4m3_w2d_bf16_v6, mxt6_smem_bytes<1, MXT6_STAGES, false>()},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v6",  nullptr, 1, MXT6_STAGES, 64, 64, mx_tgemm_e4m3e4m3_w2d_f32_v6,  mxt6_smem_bytes<1, MXT6_STAGES, false>()},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v6t", nullptr, 1, MXT6T_STAGES, 64, 64, mx_tgemm_e4m3e4m3_w2d_bf16_v6t, mxt6_smem_bytes<1, MXT6T_STAGES, true>()},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v6t",  nullptr, 1, MXT6T_STAGES, 64, 64, mx_tgemm_e4m3e4m3_w2d_f32_v6t,  mxt6_smem_bytes<1, MXT6T_STAGES, true>()},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v6n", nullptr, 1, MXT6_STAGES, 64, 64, mx_tgemm_e4m3e4m3_w2d_bf16_v6n, mxt6_smem_bytes<1, MXT6_STAGES, false>()},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v6n",  nullptr, 1, MXT6_STAGES, 64, 64, mx_tgemm_e4m3e4m3_w2d_f32_v6n,  mxt6_smem_bytes<1, MXT6_STAGES, false>()},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v7t", nullptr, 1, MXT_V2T_STAGES, 128, 64, mx_tgemm_e4m3e4m3_w2d_bf16_v7t, mxt_v2t_smem_bytes<1>()},
  {"mx_tgemm_e4m3e4m3_w2d_f32_v7t",  nullptr, 1, MXT_V2T_STAGES, 128, 64, mx_tgemm_e4m3e4m3_w2d_f32_v7t,  mxt_v2t_smem_bytes<1>()},
  {"mx_tgemm_e4m3e4m3_w2d_bf16_v7c", nullptr, 1, MXT_V2T_STAGES, 128, 64, mx_tgemm_e4m3e4m3_w2d_bf16_v7c, mxt_v2t_smem_bytes<1>()},  // diagnostic: v7t + chained stages
  {"mx_tgemm_e4m3e4m3_w2d_f32_v7c",  nullptr, 1, MXT_V2T_STAGES, 128, 64, mx_tgemm_e4m3e4m3_w2d_f32_v7c,  mxt_v2t_smem_bytes<1>()},
};

extern "C" int mx_tgemm_smem(int sb2d, int stages) {
  return stages * (sb2d ? MxtLayout<1>::STAGE : MxtLayout<0>::STAGE) + 1024;
}

extern "C" int mx_launch_tgemm(const char* name, const MxGemmParams* p, int grid, void* stream) {
  for (auto& v : g_tvariants) {
    if (strcmp(v.name, name)) continue;
    MxGemmTmaParams P;
    memset(&P, 0, sizeof(P));
    P.g = *p;
    int rc;
    if (!p->batched) {
      long long brows = p->E * (p->b_es / p->ldb);
      rc = encode_2d(&P.tmA, p->A, (unsigned long long)p->K, (unsigned long long)p->M, (unsigned long long)p->lda, v.abox);
      if (!rc) rc = encode_2d(&P.tmB, p->B, (unsigned long long)p->K, (unsigned long long)brows, (unsigned long long)p->ldb, v.bbox);
    } else {
      rc = encode_2d(&P.tmA, p->A, (unsigned long long)p->lda, (unsigned long long)p->M, (unsigned long long)p->lda, v.abox);
      if (!rc) rc = encode_2d(&P.tmB, p->B, (unsigned long long)p->ldb, (unsigned long long)p->N, (unsigned long long)p->ldb, v.bbox);
    }
    if (rc) return rc;
    int smem = v.smem > 0 ? v.smem
             : v.abox == 64 ? (v.sb2d ? mxt4_smem_bytes<1>() : mxt4_smem_bytes<0>())
             : v.abox == 256 ? mxt8_smem_bytes()
             : v.bbox == 192 ? mxt5_smem_bytes()
             : v.ko ? (v.sb2d ? mxt_v2t_smem_bytes<1>() : mxt_v2t_smem_bytes<0>()) : mx_tgemm_smem(v.sb2d, v.stages);
    static bool done[sizeof(g_tvariants) / sizeof(g_tvariants[0])] = {false};
    int idx = (int)(&v - g_tvariants);
    if (!done[idx]) {
      cudaError_t e = v.ko ? cudaFuncSetAttribute(v.ko, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)
                           : cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (e != cudaSuccess) return (int)e;
      done[idx] = true;
    }
    if (grid <= 0) {
      int dev = 0, sms = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      grid = sms;
      if (v.smem > 0) {
        // 2-CTA clusters (v6): as many as fit at once (a GPC with an odd number of free SMs
        // leaves one idle), two CTAs each
        cudaLaunchConfig_t cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.gridDim = dim3(sms & ~1, 1, 1);
        cfg.blockDim = dim3(MXT_THREADS, 1, 1);
        cfg.dynamicSmemBytes = smem;
        int nc = 0;
        cudaError_t e = cudaOccupancyMaxActiveClusters(&nc, (void*)v.ko, &cfg);
        if (e != cudaSuccess || nc <= 0) return e != cudaSuccess ? (int)e : 1;
        grid = 2 * nc;
        static bool said = false;
        if (!said) { fprintf(stderr, "v6: %d clusters of 2 CTAs on %d SMs\n", nc, sms); said = true; }
      }
    } else if (v.smem > 0) {
      grid &= ~1;
    }
    if (v.ko) {
      // Output map (bf16 only): [rows][N], rows = M (grouped) or E * M (batched, needs
      // o_es == M * ldo and out_t == 0); box 64 x 64, 128B swizzle; else o_tma = 0.
      MxGemmTmaParamsO PO;
      memset(&PO, 0, sizeof(PO));
      PO.b = P;
      const bool bf = strstr(v.name, "_bf16") != nullptr;
      const bool ok = bf && (p->ldo % 8) == 0 && ((unsigned long long)p->out % 16) == 0 &&
                      (!p->batched || (!p->out_t && p->o_es == (long long)p->M * p->ldo));
      if (ok) {
        unsigned long long orows = p->batched ? (unsigned long long)p->E * p->M : (unsigned long long)p->M;
        rc = encode_2d(&PO.tmO, p->out, (unsigned long long)p->N, orows, (unsigned long long)p->ldo * 2, 64, 1, 64);
        if (rc) return rc;
        PO.o_tma = 1;
      }
      v.ko<<<grid, MXT_THREADS, smem, (cudaStream_t)stream>>>(PO);
      return (int)cudaGetLastError();
    }
    v.k<<<grid, MXT_THREADS, smem, (cudaStream_t)stream>>>(P);
    return (int)cudaGetLastError();
  }
  return -1;
}

// Fake quantization along M (mx_fakequant_m32_*): block 128, grid x = ceil(C/128),
// y = min(nblocks, 65535) (gy_cap > 0: min(nblocks, gy_cap), to exercise the grid-stride loop).
extern "C" int mx_launch_fakequant(int in_bf16, int fmt, const MxFakeQuantParams* p, int gy_cap, void* stream) {
  typedef void (*FqK)(const MxFakeQuantParams);
  FqK k = in_bf16 ? (fmt ? mx_fakequant_m32_bf16_e5m2 : mx_fakequant_m32_bf16_e4m3)
                  : (fmt ? mx_fakequant_m32_f32_e5m2 : mx_fakequant_m32_f32_e4m3);
  if (p->nblocks <= 0 || p->C <= 0) return 0;
  int gy = p->nblocks < 65535 ? p->nblocks : 65535;
  if (gy_cap > 0 && gy > gy_cap) gy = gy_cap;
  k<<<dim3((p->C + 127) / 128, gy), 128, 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

// Fake quantization along rows (mx_fakequant_rows_*): the flat kernel over nblocks blocks,
// bf16 values to out, with the backend's grid rule.
// mx_launch_fakequant_rows_bulk: the same through mx_fakequant_rows_bulk_* (the backend's on Hopper).
static int launch_fakequant_rows(bool bulk, int in_bf16, int fmt, const void* in, void* out, long long nblocks, int mode, void* stream) {
  if (nblocks <= 0) return 0;
  MxQuantFlatParams f;
  f.in = in; f.q = (mx_u8*)out; f.s = nullptr; f.nblocks = nblocks; f.mode = mode;
  QuantFlatK k = bulk ? (in_bf16 ? (fmt ? mx_fakequant_rows_bulk_bf16_e5m2 : mx_fakequant_rows_bulk_bf16_e4m3)
                                 : (fmt ? mx_fakequant_rows_bulk_f32_e5m2 : mx_fakequant_rows_bulk_f32_e4m3))
                      : (in_bf16 ? (fmt ? mx_fakequant_rows_bf16_e5m2 : mx_fakequant_rows_bf16_e4m3)
                                 : (fmt ? mx_fakequant_rows_f32_e5m2 : mx_fakequant_rows_f32_e4m3));
  const int g = mx_quant_flat_grid(nblocks, in_bf16, bulk ? 2 : MXQF_U, bulk ? MXQB_CTAS_PER_SM : MXQF_CTAS_PER_SM, num_sms());
  k<<<g, 256, 0, (cudaStream_t)stream>>>(f);
  return (int)cudaGetLastError();
}
extern "C" int mx_launch_fakequant_rows(int in_bf16, int fmt, const void* in, void* out, long long nblocks, int mode, void* stream) {
  return launch_fakequant_rows(false, in_bf16, fmt, in, out, nblocks, mode, stream);
}
extern "C" int mx_launch_fakequant_rows_bulk(int in_bf16, int fmt, const void* in, void* out, long long nblocks, int mode, void* stream) {
  return launch_fakequant_rows(true, in_bf16, fmt, in, out, nblocks, mode, stream);
}

// mx_dequantize (per element, the reference) or mx_dequantize16 (use16), batch 1, either output.
extern "C" int mx_launch_dequantize_any(const void* q, const void* s, void* out, int out_bf16, int fmt, long long R,
                                        long long C, int rdiv, int cdiv, long long srs, int use16, void* stream) {
  if (use16) {  // as the Rust backend: block 128, x = column chunks, y = rows / MXD_U
    if (R == 0 || C == 0) return 0;
    long long gy = (R + MXD_U - 1) / MXD_U;
    if (gy > 65535) gy = 65535;
    mx_dequantize16<<<dim3((unsigned)((C / 16 + 127) / 128), (unsigned)gy), 128, 0, (cudaStream_t)stream>>>(
        (const mxd_u8*)q, (const mxd_u8*)s, out, out_bf16, fmt, R, C, rdiv, cdiv, srs);
  } else {
    long long g = (R * C + 255) / 256;
    if (g > (1 << 20)) g = 1 << 20;
    if (g < 1) return 0;
    mx_dequantize<<<dim3((unsigned)g, 1), 256, 0, (cudaStream_t)stream>>>((const mxd_u8*)q, (const mxd_u8*)s, out,
                                                                          out_bf16, fmt, R, C, rdiv, cdiv, srs, 0, 1);
  }
  return (int)cudaGetLastError();
}


// ---- the chained GEMM (../mx_chain_gemm.cu), launched as the backend is to launch it (not wired yet) ----
// Re-encoding: one warp per row, 256 threads per block, grid capped at 16 blocks per SM.
extern "C" int mx_launch_reencode(int fmt, const MxReencodeParams* p, void* stream) {
  if (p->R <= 0) return 0;
  long long blocks = (p->R + 7) / 8, cap = 16LL * num_sms();
  const int grid = (int)(blocks < cap ? blocks : cap);
  if (fmt == 0) mx_reencode_e4m3<<<grid, 256, 0, (cudaStream_t)stream>>>(*p);
  else mx_reencode_e5m2<<<grid, 256, 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

// The backend's byte transpose (mx_dequantize.cu): out[b][c][r] = in[b][r][c]; here for A'T and
// its scales (the chained GEMM's transposed reads), as the backend is to produce them.
extern "C" int mx_launch_transpose_u8(const void* in, void* out, int R, int C, int batch, void* stream) {
  if ((long long)R * C == 0 || batch <= 0) return 0;
  const dim3 grid((unsigned)((C + 127) / 128), (unsigned)((R + 127) / 128), (unsigned)batch);
  mx_transpose_u8<<<grid, 256, 0, (cudaStream_t)stream>>>((const mxd_u8*)in, (mxd_u8*)out, R, C);
  return (int)cudaGetLastError();
}

typedef void (*CGemmK)(const MxGemmChainParams);
// Grouped rows only (forward / dgrad), at most MXC_MAX_E experts, N and the transposes' row
// stride multiples of 16 (-5 otherwise: the host runs the per-k32 kernel); A map box 128 B x
// 256 rows, B's 128 x 128.
extern "C" int mx_launch_cgemm(const char* name, const MxGemmParams* p, const MxChainFix* f, int grid, void* stream) {
  static struct { const char* name; CGemmK k; int smem; bool smem_set; } ks[] = {
    {"mx_cgemm_e4m3e4m3_w2d_bf16", mx_cgemm_e4m3e4m3_w2d_bf16, mxc_smem_bytes<4, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_f32", mx_cgemm_e4m3e4m3_w2d_f32, mxc_smem_bytes<4, true>(), false},
    {"mx_cgemm_e5m2e4m3_w2d_bf16", mx_cgemm_e5m2e4m3_w2d_bf16, mxc_smem_bytes<4, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_bf16_s3", mx_cgemm_e4m3e4m3_w2d_bf16_s3, mxc_smem_bytes<3, true, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_f32_s3", mx_cgemm_e4m3e4m3_w2d_f32_s3, mxc_smem_bytes<3, true, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_bf16_poll", mx_cgemm_e4m3e4m3_w2d_bf16_poll, mxc_smem_bytes<4, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_bf16_s3_poll", mx_cgemm_e4m3e4m3_w2d_bf16_s3_poll, mxc_smem_bytes<3, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_f32_poll", mx_cgemm_e4m3e4m3_w2d_f32_poll, mxc_smem_bytes<4, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_f32_s3_poll", mx_cgemm_e4m3e4m3_w2d_f32_s3_poll, mxc_smem_bytes<3, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_bf16_sepi", mx_cgemm_e4m3e4m3_w2d_bf16_sepi, mxc_smem_bytes<4, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_bf16_s3_sepi", mx_cgemm_e4m3e4m3_w2d_bf16_s3_sepi, mxc_smem_bytes<3, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_f32_s3_sepi", mx_cgemm_e4m3e4m3_w2d_f32_s3_sepi, mxc_smem_bytes<3, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_bf16_s3_cc", mx_cgemm_e4m3e4m3_w2d_bf16_s3_cc, mxc_smem_bytes<3, true>(), false},
    {"mx_cgemm_e4m3e4m3_w2d_f32_s3_cc", mx_cgemm_e4m3e4m3_w2d_f32_s3_cc, mxc_smem_bytes<3, true>(), false},
  };
  if (p->batched) return -4;
  if (p->E > MXC_MAX_E || p->N % 16 != 0 || f->ldt % 16 != 0) return -5;
  for (auto& v : ks) {
    if (strcmp(v.name, name)) continue;
    MxGemmChainParams P;
    memset(&P, 0, sizeof(P));
    P.b.g = *p;
    P.f = *f;
    const long long brows = p->E * (p->b_es / p->ldb);
    int rc = encode_2d(&P.b.tmA, p->A, (unsigned long long)p->K, (unsigned long long)p->M, (unsigned long long)p->lda, 256);
    if (!rc) rc = encode_2d(&P.b.tmB, p->B, (unsigned long long)p->K, (unsigned long long)brows, (unsigned long long)p->ldb, 128);
    if (rc) return rc;
    const int smem = v.smem;
    if (!v.smem_set) {   // once per kernel, as mx_launch_tgemm does
      cudaError_t e = cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (e != cudaSuccess) return (int)e;
      v.smem_set = true;
    }
    if (grid <= 0) grid = num_sms();
    v.k<<<grid, MXT_THREADS, smem, (cudaStream_t)stream>>>(P);
    return (int)cudaGetLastError();
  }
  return -1;
}
