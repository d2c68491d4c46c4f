// mainloop_slices.cu — is the anchors' main-loop rate (mx_mainloop_overlap.cu, F with 32x32
// weight scales: u = 456 TFLOP/s per GHz at the cap, docs/perf.md run 78) a property of the
// loop, or of its operands sitting at one shared-memory address? F reads the same 64x32 A and
// 128x32 B bytes for every wgmma; a real kernel reads a new k32 slice every step. Here the same
// loop (one warpgroup per CTA, 2 CTAs per SM, m64n128k32, 8-step straight-line groups, scales
// from shared memory, write-only partials) reads NSL distinct slices in turn (NSL = 1 is F).
// NWG = 2 puts two such warpgroups in one CTA that share the B slices (run 84); GS = 4 drains
// every 4 steps as the backend's v2 does (run 85).
// Diagnostic (run 83); results are a checksum, not checked. Build and run on the GPU machine:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -o ms mainloop_slices.cu && ./ms
// Each variant runs ~3 s back to back; sample the SM clock with nvidia-smi alongside.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <chrono>
#include <cuda_runtime.h>

__device__ __forceinline__ uint64_t desc_of(uint32_t a) {
  return ((a & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}
__device__ __forceinline__ void mma(float* d, uint64_t da, uint64_t db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
   "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n}\n"
   : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63]) : "l"(da), "l"(db));
}
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
__device__ __forceinline__ void pin(float* r) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(r[i]) :: "memory");
}
__device__ __forceinline__ void promote(float* acc, const float* t, float s0, float s1, const float* sb4) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const float p0 = s0 * sb4[b], p1 = s1 * sb4[b];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int q = (b * 4 + j) * 4;
      acc[q] = fmaf(t[q], p0, acc[q]); acc[q + 1] = fmaf(t[q + 1], p0, acc[q + 1]);
      acc[q + 2] = fmaf(t[q + 2], p1, acc[q + 2]); acc[q + 3] = fmaf(t[q + 3], p1, acc[q + 3]);
    }
  }
}
constexpr int ABYTES = 64 * 32, BBYTES = 128 * 32;
// NSL slices of A and B; step s reads slice s % NSL. NWG = 1: one warpgroup per CTA (2 CTAs
// per SM, as F), NSL * 6 KB; NWG = 2: two warpgroups per CTA sharing each B slice, each with
// its own 64 rows of a 128-row A slice (the backend kernel's consumers, one CTA per SM),
// NSL * 8 KB.
// GS = k32 steps per straight-line group, drained at its end: 8 as F, 4 as the backend's v2.
template <int NSL, int NWG, int GS>
__global__ void __launch_bounds__(128 * NWG, 1) slices(const uint8_t* gA, const uint8_t* gB, const float* gs, float* out, int iters) {
  extern __shared__ __align__(128) uint8_t sm[];
  __shared__ float ssa[16][64];
  __shared__ __align__(16) float ssb[16][128];
  uint8_t* sA = sm;
  uint8_t* sB = sm + NSL * NWG * ABYTES;
  const int tid = threadIdx.x, t = tid & 127, wg = tid >> 7;
  for (int i = tid; i < NSL * NWG * ABYTES; i += 128 * NWG) sA[i] = gA[i];
  for (int i = tid; i < NSL * BBYTES; i += 128 * NWG) sB[i] = gB[i];
  for (int i = tid; i < 16 * 64; i += 128 * NWG) (&ssa[0][0])[i] = gs[i & 255];
  for (int i = tid; i < 16 * 128; i += 128 * NWG) (&ssb[0][0])[i] = gs[(i * 7) & 255];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t a0 = (uint32_t)__cvta_generic_to_shared(sA), b0 = (uint32_t)__cvta_generic_to_shared(sB);
  const int row0 = 16 * (t / 32) + (t % 32) / 4;
  float acc[64], t0[64], t1[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  auto da = [&](int s) { return desc_of(a0 + ((s % NSL) * NWG + wg) * ABYTES); };
  auto db = [&](int s) { return desc_of(b0 + (s % NSL) * BBYTES); };
  auto step = [&](float* buf, int ks) {
    float sb4[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) sb4[b] = ssb[ks & 15][b * 32];
    promote(acc, buf, ssa[ks & 15][row0], ssa[ks & 15][row0 + 8], sb4);
  };
  for (int it = 0; it < iters; it += GS) {
    fence(); mma(t0, da(it), db(it)); commit();
#pragma unroll
    for (int k = 0; k < GS / 2 - 1; ++k) {
      fence(); mma(t1, da(it + 2 * k + 1), db(it + 2 * k + 1)); commit(); wait<1>(); pin(t0); step(t0, it + 2 * k);
      fence(); mma(t0, da(it + 2 * k + 2), db(it + 2 * k + 2)); commit(); wait<1>(); pin(t1); step(t1, it + 2 * k + 1);
    }
    fence(); mma(t1, da(it + GS - 1), db(it + GS - 1)); commit(); wait<1>(); pin(t0); step(t0, it + GS - 2);
    wait<0>(); pin(t1); step(t1, it + GS - 1);
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  out[blockIdx.x * 128 * NWG + tid] = s;
}
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)
template <int NSL, int NWG = 1, int GS = 8>
void run(const uint8_t* A, const uint8_t* B, const float* S, float* O, int ctas) {
  const int smem = NSL * (NWG * ABYTES + BBYTES);
  CK(cudaFuncSetAttribute(slices<NSL, NWG, GS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int iters = 24000;
  slices<NSL, NWG, GS><<<ctas, 128 * NWG, smem>>>(A, B, S, O, 64); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  int n = 0; float ms = 0.f;
  const double t0 = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CK(cudaEventRecord(e0));
  for (; n < 4000; ++n) {
    slices<NSL, NWG, GS><<<ctas, 128 * NWG, smem>>>(A, B, S, O, iters);
    if (n % 50 == 49) { CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1)); if (ms > 3000) { ++n; break; } }
  }
  CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1));
  const double flops = 2.0 * 64 * 128 * 32 * (double)iters * ctas * NWG * n;
  const double t1 = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  printf("slices=%2d wg/CTA=%d steps/group=%d (%3d KB smem/CTA), sustained %d launches in %.0f ms: %7.1f TFLOP/s  [epoch %.3f %.3f]\n", NSL, NWG, GS, smem / 1024, n, ms,
         flops / (ms * 1e-3) / 1e12, t0, t1);
  fflush(stdout);
}
int main() {
  const int MAXSL = 16;
  std::vector<uint8_t> a(MAXSL * 2 * ABYTES), b(MAXSL * BBYTES); std::vector<float> s(256);
  srand(1);
  for (auto& x : a) { x = rand() & 0xFF; if ((x & 0x7F) == 0x7F) x = 0; }
  for (auto& x : b) { x = rand() & 0xFF; if ((x & 0x7F) == 0x7F) x = 0; }
  for (auto& x : s) x = (float)(1 << (rand() % 5)) / 4.f;
  uint8_t *dA, *dB; float *dS, *dO;
  CK(cudaMalloc(&dA, a.size())); CK(cudaMalloc(&dB, b.size())); CK(cudaMalloc(&dS, s.size() * 4)); CK(cudaMalloc(&dO, 1024 * 128 * 4));
  CK(cudaMemcpy(dA, a.data(), a.size(), cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, b.data(), b.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dS, s.data(), s.size() * 4, cudaMemcpyHostToDevice));
  const int ctas = 264;  // 2 per SM on 132 SMs
  run<1>(dA, dB, dS, dO, ctas);
  run<16>(dA, dB, dS, dO, ctas);
  run<16, 2>(dA, dB, dS, dO, ctas / 2);  // one CTA of two warpgroups per SM
  run<16, 1, 4>(dA, dB, dS, dO, ctas);   // 4-step groups (v2's)
  run<16, 2, 4>(dA, dB, dS, dO, ctas / 2);
  run<16>(dA, dB, dS, dO, ctas);
  return 0;
}
