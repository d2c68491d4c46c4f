// tgemm_driver.cpp — runs the TMA grouped GEMM kernels (cuda/include/mx_tgemm_*.cuh) on the host
// through simt.hpp + simt_sm90.hpp, for tests/tgemm_host.rs: grouped rows (forward, dgrad) or
// batched K segments (the FP8 wgrad, MXHOST_MX_WGRAD=fp8).
// Usage: driver IN OUT. IN: 16 little-endian i64 (E, M, N, K, FA, FB, W2D, OUT_BF16, KERNEL,
// GRID, O_TMA, LDA, LDSA, LDSB, BATCHED, OUT_T), then offs (E x i32, cumulative row ends; batched:
// each expert's K segment length, cumulative), A (M x LDA bytes), B (grouped: E x N x LDA bytes;
// batched: N x LDA), SA (the stage-major f32 table: KB4 / 4 stages x LDSA), SB (f32, grouped:
// E x KB4 x LDSB; batched: KB4 x LDSB), KB4 = ceil(K / 32) rounded up to 4 (batched: LDA / 32,
// the experts' 128-padded segments side by side). KERNEL: 0 = mx_tgemm MODE 0 (the
// backend's 1x32-weight kernel), 1 = v2u (32x32 weights, f32 output), 2 = v2t (32x32
// weights, bf16 output, TMA-store epilogue when O_TMA = 1), 3 = mx_gemm (the cp.async
// kernels, the fallback where TMA is unavailable; both weight layouts). OUT: the output (M x N, bf16 or
// f32; batched: E x M x N, or E x N x M with OUT_T), poisoned with 0xA5 before the launch.
#include "simt.hpp"
#include "simt_sm90.hpp"
#include "mx_gemm_common.cuh"
#include "mx_gemm_cpasync.cuh"
#include "mx_tgemm_pipeline.cuh"
#include "mx_tgemm_mainloop.cuh"
#include "mx_tgemm_roles.cuh"
#include "mx_tgemm_kernels.cuh"

constexpr int STAGES = 6, V2T_STAGES = 5;   // the backend's (kernels.rs, mx_grouped_gemm.cu)
constexpr int GEMM_NC = 2, GEMM_STAGES = 5;  // mx_gemm_*: kernels.rs GEMM_NC, GEMM_STAGES

template <class T> bool read_into(FILE* f, std::vector<T>& v, size_t n) {
  v.resize(n);
  return fread(v.data(), sizeof(T), n, f) == n;
}

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[16];
  if (!in || fread(h, 8, 16, in) != 16) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const int E = (int)h[0], M = (int)h[1], N = (int)h[2], K = (int)h[3], fa = (int)h[4], fb = (int)h[5];
  const int w2d = (int)h[6], obf = (int)h[7], kernel = (int)h[8], grid = (int)h[9], o_tma = (int)h[10];
  const mx_i64 lda = h[11], ldsa = h[12], ldsb = h[13];
  const int batched = (int)h[14], out_t = (int)h[15];
  const mx_i64 kb4 = batched ? lda / 32 : ((K + 31) / 32 + 3) / 4 * 4;
  const mx_i64 b_rows = batched ? N : (mx_i64)E * N, sb_rows = batched ? kb4 : E * kb4;
  std::vector<int> offs;
  std::vector<mx_u8> A, B;
  std::vector<float> SA, SB;
  if (!read_into(in, offs, E) || !read_into(in, A, M * lda) || !read_into(in, B, b_rows * lda) ||
      !read_into(in, SA, kb4 / 4 * ldsa) || !read_into(in, SB, sb_rows * ldsb)) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  fclose(in);
  const size_t out_bytes = (size_t)(batched ? E : 1) * M * N * (obf ? 2 : 4);
  std::vector<mx_u8> out(out_bytes, 0xA5);

  MxGemmTmaParamsO P{};
  MxGemmParams& g = P.b.g;
  g.A = A.data(); g.lda = lda;
  g.B = B.data(); g.ldb = lda; g.b_es = batched ? 0 : (mx_i64)N * lda;
  g.SA = SA.data(); g.ldsa = ldsa;
  g.SB = SB.data(); g.ldsb = ldsb; g.sb_es = batched ? 0 : kb4 * ldsb;
  // (as wgrad.rs: batched output [E][M][N], or [E][N][M] transposed)
  g.out = out.data(); g.ldo = out_t ? M : N; g.o_es = batched ? (mx_i64)M * N : 0;
  g.offs = offs.data(); g.E = E; g.M = M; g.N = N; g.K = batched ? 0 : K; g.batched = batched; g.out_t = out_t;
  // the backend's maps (tma.rs): operands box 128 x 128 bytes, output bf16 box 64 x 64
  const mx_u64 inner = batched ? lda : K;
  P.b.tmA = simt_tmap_2d(A.data(), 1, inner, M, lda, 128, 128, true);
  P.b.tmB = simt_tmap_2d(B.data(), 1, inner, b_rows, lda, 128, 128, true);
  P.tmO = simt_tmap_2d(out.data(), 2, N, (mx_u64)(batched ? E : 1) * M, 2 * (mx_u64)N, 64, 64, true);
  P.o_tma = o_tma;
  P.b.gate = nullptr;

  const simt_dim3 g3{(unsigned)grid, 1, 1};
  const size_t smem_v2t = V2T_STAGES * MxtLayout<1>::STAGE + 2 * 16384 + 1024;
  const size_t smem = STAGES * (w2d ? MxtLayout<1>::STAGE : MxtLayout<0>::STAGE) + 1024;
  const MxGemmTmaParams& pb = P.b;
#define MODE0(FA, FB, OBF) simt_launch(g3, MXT_THREADS, [&] { mx_tgemm_impl<FA, FB, 0, OBF, STAGES, 0>(pb); }, smem)
#define V2U(FA, FB) simt_launch(g3, MXT_THREADS, [&] { mx_tgemm_v2_impl<FA, FB, 1, 0, STAGES, 1, MXT_OPT_UWG>(pb); }, smem)
#define V2T(FA, FB)                                                                                                        \
  simt_launch(g3, MXT_THREADS, [&] {                                                                                       \
    mx_tgemm_v2_impl<FA, FB, 1, 1, V2T_STAGES, 1, MXT_OPT_UWG | MXT_OPT_TMA_STORE>(pb, P.o_tma ? &P.tmO : nullptr); \
  }, smem_v2t)
  if (kernel == 3) {   // device.rs gemm_smem: stages x (39040 | 40960) bytes, 128 (NC + 1) threads
    const size_t gsm = GEMM_STAGES * (w2d ? 39040 : 40960);
    const MxGemmParams& gp = P.b.g;
#define GEMM(FA, FB, SB2D, OBF) \
  simt_launch(g3, 128 * (GEMM_NC + 1), [&] { mx_grouped_gemm_impl<GEMM_NC, FA, FB, SB2D, OBF, GEMM_STAGES>(gp); }, gsm)
    switch (w2d * 1000 + fa * 100 + fb * 10 + obf) {
      case 1001: GEMM(0, 0, 1, 1); break;
      case 1: GEMM(0, 0, 0, 1); break;
      case 110: GEMM(1, 1, 0, 0); break;
      default: fprintf(stderr, "no mx_gemm build for w2d %d, formats %d/%d, bf16 output %d\n", w2d, fa, fb, obf); return 2;
    }
  }
  // the combinations the tests ask for (each one compiles the whole kernel)
  const int key = kernel * 1000 + fa * 100 + fb * 10 + obf;
  if (kernel == 0 && w2d) { fprintf(stderr, "MODE 0 runs 1x32 weights here\n"); return 2; }
  if ((kernel == 1 || kernel == 2) && !w2d) { fprintf(stderr, "v2u / v2t run 32x32 weights\n"); return 2; }
  if (kernel != 3) switch (key) {
    case 1: MODE0(0, 0, 1); break;
    case 0: MODE0(0, 0, 0); break;
    case 101: MODE0(1, 0, 1); break;
    case 1000: V2U(0, 0); break;
    case 1110: V2U(1, 1); break;
    case 2001: V2T(0, 0); break;
    case 2101: V2T(1, 0); break;
    default: fprintf(stderr, "no build for kernel %d, formats %d/%d, bf16 output %d\n", kernel, fa, fb, obf); return 2;
  }
  FILE* o = fopen(argv[2], "wb");
  if (!o) return 2;
  fwrite(out.data(), 1, out.size(), o);
  fclose(o);
  return 0;
}
