// fp8_encode_check.cu — the portable build's software FP32 -> FP8 conversion
// (mx_fp8_rn_sat_sw, include/mx_numerics.cuh) against the hardware cvt.rn.satfinite on
// every one of the 2^32 FP32 bit patterns, both formats. Needs sm_89+ (the hardware
// conversion); NaN inputs compare as "both NaN codes" (the quantizers never convert a NaN).
// Build + run on the GPU machine: nvcc -gencode arch=compute_90a,code=sm_90a -O3
//   -Iplugin-mxfp8/cuda/include -o fp8check plugin-mxfp8/cuda/bench/fp8_encode_check.cu && ./fp8check
#include <cstdio>
#include "mx_ptx.cuh"
#include "mx_numerics.cuh"

template <int FMT> __global__ void check(unsigned long long* bad, unsigned* first) {
  const unsigned long long n = 1ull << 32;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const float x = __int_as_float((int)(unsigned)i);
    const mx_u32 hw = cvt_fp8x2<FMT>(x, 0.f) & 0xFFu;
    const mx_u32 sw = mx_fp8_rn_sat_sw<FMT>(x);
    const bool nan_in = ((unsigned)i & 0x7FFFFFFFu) > 0x7F800000u;
    const mx_u32 nanm = FMT == 0 ? 0x7Fu : 0x7Cu;  // E4M3 NaN x1111111; E5M2 NaN x11111mm, mm != 0
    const bool both_nan = nan_in && (hw & nanm) == nanm && (sw & nanm) == nanm;
    if (hw != sw && !both_nan) {
      if (atomicAdd(bad, 1ull) == 0) *first = (unsigned)i;
    }
  }
}

int main() {
  unsigned long long* bad;
  unsigned* first;
  cudaMallocManaged(&bad, 8);
  cudaMallocManaged(&first, 4);
  int fails = 0;
  for (int fmt = 0; fmt < 2; ++fmt) {
    *bad = 0;
    *first = 0;
    if (fmt == 0) check<0><<<132 * 16, 256>>>(bad, first);
    else check<1><<<132 * 16, 256>>>(bad, first);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("CUDA error: %s\n", cudaGetErrorString(e)); return 2; }
    printf("%s: %llu of 2^32 FP32 inputs differ between mx_fp8_rn_sat_sw and cvt.rn.satfinite%s",
           fmt == 0 ? "e4m3" : "e5m2", *bad, *bad ? "" : "\n");
    if (*bad) { printf(" (first 0x%08x)\n", *first); fails++; }
  }
  printf("fp8_encode_check: %s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
