// rows_wv_driver.cpp — runs mx_quant_rows_wv (cuda/include/mx_quant_rows_wv.cuh) on the host
// through simt.hpp, for tests/rows_wv_host.rs. FP8 conversions take mx_numerics.cuh's software
// path here (bit-identical to the GPU's cvt.rn.satfinite, see simt.hpp).
// Usage: driver IN OUT. IN: 6 little-endian i64 (R, C, fmt, mode, grid y, vals), then the bf16
// input [R][C]. OUT, every buffer poisoned with 0xA5 first (not a NaN in bf16): q ([R][C]
// bytes), s ([R][C / 32]), wv ([R][C] bf16) and, with vals = 1 (the VALS build,
// mx_quantize_rows_vals_wv_bf16_*), the row values ([R][C] bf16).
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_quant_blocks.cuh"
#include "mx_quant_values.cuh"
#include "mx_fakequant.cuh"
#include "mx_quant_rows_wv.cuh"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[6];
  if (!in || fread(h, 8, 6, in) != 6) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 R = h[0], C = h[1];
  std::vector<mx_u16> x(R * C);
  if (fread(x.data(), 2, x.size(), in) != x.size()) { fprintf(stderr, "short input\n"); return 2; }
  fclose(in);
  std::vector<mx_u8> q(R * C, 0xA5), s(R * C / 32, 0xA5), wv(2 * R * C, 0xA5), vals(h[5] ? 2 * R * C : 0, 0xA5);
  mx_u16* v = reinterpret_cast<mx_u16*>(vals.data());
  const MxQuantRowsWvParams p{x.data(), q.data(), s.data(), reinterpret_cast<mx_u16*>(wv.data()), (int)R, (int)C, (int)h[3]};
  const simt_dim3 grid{(unsigned)((C + 127) / 128), (unsigned)h[4], 1};
  if (h[2] == 0 && !h[5]) simt_launch(grid, 128, [&] { mx_quant_rows_wv<0>(p); });
  if (h[2] == 1 && !h[5]) simt_launch(grid, 128, [&] { mx_quant_rows_wv<1>(p); });
  if (h[2] == 0 && h[5]) simt_launch(grid, 128, [&] { mx_quant_rows_wv<0, 1>(p, v); });
  if (h[2] == 1 && h[5]) simt_launch(grid, 128, [&] { mx_quant_rows_wv<1, 1>(p, v); });
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  for (auto* b : {&q, &s, &wv, &vals}) fwrite(b->data(), 1, b->size(), out);
  fclose(out);
  return 0;
}
