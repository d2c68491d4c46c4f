// flat_driver.cpp — runs the default path's quantizers on the host through simt.hpp, for
// tests/flat_quantize_host.rs: the flat 1x32 quantizer (mx_quant_flat.cuh, the production
// instantiations: MXQF_U, plain loads and stores) writing bytes and scales (FAKE 0), MX values
// in bf16 (1), or both (2), and the fake quantization along M (mx_fakequant.cuh). The host takes
// the FP8 conversions' software paths (see simt.hpp).
// Usage: driver IN OUT. IN: 8 little-endian i64 (kernel: 0-2 flat with FAKE = kernel, 3 along
// M; in_bf16, fmt, mode, R, C, grid x (flat) , nblocks (along M)), then the input ([R][C], bf16
// or f32) and, along M, the block table (nblocks pairs of i32 row0, nrows). OUT, poisoned with
// 0xA5 first: flat: q (R C bytes, or R C bf16 for FAKE 1), s (R C / 32; none for FAKE 1), and
// the values (R C bf16) for FAKE 2; along M: out (R C bf16).
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_quant_blocks.cuh"
#include "mx_quant_values.cuh"
#include "mx_quant_flat.cuh"
#include "mx_fakequant.cuh"

template <int BF, int F> static void flat(int fake, const MxQuantFlatParams& p, mx_u16* vals, unsigned grid) {
  if (fake == 0) simt_launch({grid, 1, 1}, 256, [&] { mx_quant_flat<BF, F, MXQF_U, 0, 0>(p); });
  if (fake == 1) simt_launch({grid, 1, 1}, 256, [&] { mx_quant_flat<BF, F, MXQF_U, 0, 0, 1>(p); });
  if (fake == 2) simt_launch({grid, 1, 1}, 256, [&] { mx_quant_flat<BF, F, MXQF_U, 0, 0, 2>(p, vals); });
}
template <int BF, int F> static void along_m(const MxFakeQuantParams& p) {
  const unsigned gx = (unsigned)((p.C + 127) / 128), gy = (unsigned)(p.nblocks < 7 ? p.nblocks : 7);
  simt_launch({gx, gy > 0 ? gy : 1, 1}, 128, [&] { mx_fakequant_m32<BF, F>(p); });
}

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[8];
  if (!in || fread(h, 8, 8, in) != 8) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const int kernel = (int)h[0], bf = (int)h[1], fmt = (int)h[2], mode = (int)h[3];
  const mx_i64 R = h[4], C = h[5], n = R * C;
  std::vector<unsigned char> x(n * (bf ? 2 : 4));
  std::vector<int> blocks(2 * h[7]);
  if (fread(x.data(), 1, x.size(), in) != x.size() || fread(blocks.data(), 4, blocks.size(), in) != blocks.size()) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  fclose(in);
  std::vector<unsigned char> q, s, vals;
  if (kernel < 3) {
    q.assign(kernel == 1 ? 2 * n : n, 0xA5);
    s.assign(kernel == 1 ? 0 : n / 32, 0xA5);
    vals.assign(kernel == 2 ? 2 * n : 0, 0xA5);
    MxQuantFlatParams p{x.data(), q.data(), s.empty() ? nullptr : s.data(), n / 32, mode};
    mx_u16* v = vals.empty() ? nullptr : reinterpret_cast<mx_u16*>(vals.data());
    const unsigned grid = (unsigned)h[6];
    if (bf && fmt == 0) flat<1, 0>(kernel, p, v, grid);
    if (bf && fmt == 1) flat<1, 1>(kernel, p, v, grid);
    if (!bf && fmt == 0) flat<0, 0>(kernel, p, v, grid);
    if (!bf && fmt == 1) flat<0, 1>(kernel, p, v, grid);
  } else {
    q.assign(2 * n, 0xA5);
    MxFakeQuantParams p{x.data(), reinterpret_cast<mx_u16*>(q.data()), blocks.data(), (int)R, (int)C, mode, (int)h[7]};
    if (bf && fmt == 0) along_m<1, 0>(p);
    if (bf && fmt == 1) along_m<1, 1>(p);
    if (!bf && fmt == 0) along_m<0, 0>(p);
    if (!bf && fmt == 1) along_m<0, 1>(p);
  }
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  for (auto* v : {&q, &s, &vals}) fwrite(v->data(), 1, v->size(), out);
  fclose(out);
  return 0;
}
