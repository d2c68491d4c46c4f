// tile_driver.cpp — runs the tiled quantizer mx_quant_tile (cuda/include/mx_quant_tile.cuh) for
// f32 input (mx_quantize_f32_*: the register-prefetch loops; bf16 input reads through a
// cp.async ring, which stays on the GPU) on the host through simt.hpp, for
// tests/tile_quantize_host.rs.
// Usage: driver IN OUT. IN: 15 little-endian i64 (fmt, mode, flags, batch, R, C, ldt, ldst, E,
// grouped_tiles, grid y, then the element counts of qa, sa, qt, st), the f32 input
// ([batch][R][C]) and E i32 offsets (cumulative row ends; E = 0: ungrouped). OUT: qa, sa, qt,
// st as the kernel left them, each poisoned with 0xA5 first (batch strides: the counts / batch).
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_quant_blocks.cuh"
#include "mx_quant_values.cuh"
#include "mx_quant_tile.cuh"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[15];
  if (!in || fread(h, 8, 15, in) != 15) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 batch = h[3], R = h[4], C = h[5], E = h[8];
  std::vector<float> x(batch * R * C);
  std::vector<int> offs(E);
  if (fread(x.data(), 4, x.size(), in) != x.size() || fread(offs.data(), 4, E, in) != (size_t)E) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  fclose(in);
  std::vector<mx_u8> qa(h[11], 0xA5), sa(h[12], 0xA5), qt(h[13], 0xA5), st(h[14], 0xA5);
  MxQuantParams p{};
  p.in = x.data(); p.in_bs = R * C; p.R = (int)R; p.C = (int)C; p.flags = (int)h[2]; p.mode = (int)h[1];
  p.qa = qa.empty() ? nullptr : qa.data(); p.sa = sa.empty() ? nullptr : sa.data();
  p.qa_bs = h[11] / batch; p.sa_bs = h[12] / batch;
  p.qt = qt.empty() ? nullptr : qt.data(); p.st = st.empty() ? nullptr : st.data();
  p.qt_bs = h[13] / batch; p.st_bs = h[14] / batch;
  p.ldt = (int)h[6]; p.ldst = (int)h[7];
  p.offs = E ? offs.data() : nullptr; p.E = (int)E; p.grouped_tiles = (int)h[9];
  const simt_dim3 grid{(unsigned)((C + 127) / 128), (unsigned)h[10], (unsigned)batch};
  if (h[0] == 0) simt_launch(grid, 256, [&] { mx_quant_tile<0, 0, 0>(p); });
  else simt_launch(grid, 256, [&] { mx_quant_tile<0, 1, 0>(p); });
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  for (auto* v : {&qa, &sa, &qt, &st}) fwrite(v->data(), 1, v->size(), out);
  fclose(out);
  return 0;
}
