// tile_driver.cpp — runs the tiled quantizers (cuda/include/mx_quant_tile.cuh) on the host through
// simt.hpp + simt_sm90.hpp, for tests/tile_quantize_host.rs: mx_quant_tile for f32 input
// (mx_quantize_f32_*: the register-prefetch loops) or bf16 input (mx_quantize_bf16_*: the
// cp.async ring), and mx_quant_tile32 (bf16 through a TMA ring: mx_quantize_t32_*, and the
// row-group build mx_quantize_t32l_*, the backend's quantizer of W with Wᵀ).
// Usage: driver IN OUT. IN: 16 little-endian i64 (fmt, mode, flags, batch, R, C, ldt, ldst, E,
// grouped_tiles, grid y, the element counts of qa, sa, qt, st, then KERNEL: 0 f32 input, 1 bf16
// ring, 2 t32, 3 t32l), the f32 input ([batch][R][C]; KERNEL >= 1: rounded to bf16 here, to
// nearest even) and E i32 offsets (cumulative row ends; E = 0: ungrouped). OUT: qa, sa, qt, st as
// the kernel left them, each poisoned with 0xA5 first (batch strides: the counts / batch).
#include "simt.hpp"
#include "simt_sm90.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_quant_blocks.cuh"
#include "mx_quant_values.cuh"
#include "mx_quant_tile.cuh"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[16];
  if (!in || fread(h, 8, 16, in) != 16) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 batch = h[3], R = h[4], C = h[5], E = h[8];
  std::vector<float> x(batch * R * C);
  std::vector<int> offs(E);
  if (fread(x.data(), 4, x.size(), in) != x.size() || fread(offs.data(), 4, E, in) != (size_t)E) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  fclose(in);
  const int kernel = (int)h[15];
  std::vector<mx_u16> xb(kernel ? x.size() : 0);
  for (size_t i = 0; i < xb.size(); ++i) xb[i] = (mx_u16)simt_bf16_rn(x[i]);
  std::vector<mx_u8> qa(h[11], 0xA5), sa(h[12], 0xA5), qt(h[13], 0xA5), st(h[14], 0xA5);
  MxQuantParams p{};
  p.in = kernel ? (const void*)xb.data() : (const void*)x.data(); p.in_bs = R * C; p.R = (int)R; p.C = (int)C; p.flags = (int)h[2]; p.mode = (int)h[1];
  p.qa = qa.empty() ? nullptr : qa.data(); p.sa = sa.empty() ? nullptr : sa.data();
  p.qa_bs = h[11] / batch; p.sa_bs = h[12] / batch;
  p.qt = qt.empty() ? nullptr : qt.data(); p.st = st.empty() ? nullptr : st.data();
  p.qt_bs = h[13] / batch; p.st_bs = h[14] / batch;
  p.ldt = (int)h[6]; p.ldst = (int)h[7];
  p.offs = E ? offs.data() : nullptr; p.E = (int)E; p.grouped_tiles = (int)h[9];
  const simt_dim3 grid{(unsigned)((C + 127) / 128), (unsigned)h[10], (unsigned)batch};
  // the TMA kernels' input map (quantize.rs): bf16 [batch * R][C], box 128 x 32, no swizzle
  MxQuantTmaParams tp{simt_tmap_2d(xb.data(), 2, C, batch * R, 2 * C, 128, 32, false), p};
  const int key = kernel * 10 + (int)h[0];
  switch (key) {
    case 0: simt_launch(grid, 256, [&] { mx_quant_tile<0, 0, 0>(p); }); break;
    case 1: simt_launch(grid, 256, [&] { mx_quant_tile<0, 1, 0>(p); }); break;
    case 10: simt_launch(grid, 256, [&] { mx_quant_tile<1, 0, MXQ_ASYNC_STAGES>(p); }); break;
    case 11: simt_launch(grid, 256, [&] { mx_quant_tile<1, 1, MXQ_ASYNC_STAGES>(p); }); break;
    case 20: simt_launch(grid, 256, [&] { mx_quant_tile32<0, MXQ_ASYNC_STAGES, 0>(tp); }); break;
    case 21: simt_launch(grid, 256, [&] { mx_quant_tile32<1, MXQ_ASYNC_STAGES, 0>(tp); }); break;
    case 30: simt_launch(grid, 256, [&] { mx_quant_tile32<0, MXQ_ASYNC_STAGES, 1>(tp); }); break;
    case 31: simt_launch(grid, 256, [&] { mx_quant_tile32<1, MXQ_ASYNC_STAGES, 1>(tp); }); break;
    default: fprintf(stderr, "no kernel %d\n", kernel); return 2;
  }
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  for (auto* v : {&qa, &sa, &qt, &st}) fwrite(v->data(), 1, v->size(), out);
  fclose(out);
  return 0;
}
