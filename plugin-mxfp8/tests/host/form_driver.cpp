// form_driver.cpp — runs mx_quant_block_form (cuda/include/mx_quant_block_form.cuh) on the host
// through simt.hpp, for tests/block_form_host.rs. FP8 conversion takes mx_numerics.cuh's
// software path here (bit-identical to the GPU's cvt.rn.satfinite over all 2^32 inputs:
// cuda/bench/fp8_encode_check.cu); the rest is the kernel's own code.
// Usage: driver IN OUT. IN: 9 little-endian i64 (R, C, fmt, mode, blocks per CTA: 1 or 4, or 2
// for the prefetching WV NOQ build (PF: two CTAs per row block walk its column blocks), wv: 0
// or 1, the WV build mx_quantize_rows_form_wv_*, one block per CTA; noq: 0 the build that writes
// q, 1 the NOQ build (one block per CTA), 2 the NOQ build then mx_plain_from_form
// (mx_plain_from_form.cuh), 3 the same with a gate the chained GEMM took (so it writes nothing),
// 4 the NOQ build given no s (it writes s transposed into s2), 5 that, then mx_plain_from_form
// writing s from it; need: 0 no need map, 1 the one that follows the input; E: its experts),
// then the bf16 input [R][C], then with need = 1 the experts' end rows offs[E] (i32) and the
// need map [E][C / 32] (u32).
// OUT, every buffer poisoned with 0xA5 before the launch: q, s, q2, s2, at, sat, mc, sa (f32),
// then status[2] (i32), then with wv = 1 wv ([R][C] bf16).
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_quant_blocks.cuh"
#include "mx_fp8_shift.cuh"
#include "mx_reencode.cuh"
#include "mx_quant_values.cuh"
#include "mx_fakequant.cuh"
#include "mx_quant_block_form.cuh"
#include "mx_warp.cuh"
#include "mx_plain_from_form.cuh"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[9];
  if (!in || fread(h, 8, 9, in) != 9) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 R = h[0], C = h[1], KB = C / 32, NS = (C + 127) / 128, E = h[8];
  const bool with_need = h[7] != 0;
  std::vector<mx_u16> x(R * C);
  std::vector<int> offs(with_need ? E : 0);
  std::vector<mx_u32> need(with_need ? E * KB : 0);
  if (fread(x.data(), 2, x.size(), in) != x.size() || fread(offs.data(), 4, offs.size(), in) != offs.size() ||
      fread(need.data(), 4, need.size(), in) != need.size()) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  fclose(in);
  auto poisoned = [](mx_i64 n) { return std::vector<mx_u8>(n, 0xA5); };
  std::vector<mx_u8> q = poisoned(R * C), s = poisoned(R * KB), q2 = poisoned(R * C), s2 = poisoned(R * KB),
                     at = poisoned(C * R), sat = poisoned(KB * R), mc = poisoned(NS * R),
                     sa = poisoned(NS * 4 * R * 4);
  std::vector<int> status(2, 0);
  const bool wv = h[5] != 0;
  std::vector<mx_u8> wvb = poisoned(wv ? 2 * R * C : 0);   // (not a NaN: a NaN poison would pass as a NaN value)
  MxQuantBlockFormParams p{};
  p.in = x.data(); p.q = q.data(); p.s = s.data(); p.q2 = q2.data(); p.s2 = s2.data();
  p.at = at.data(); p.sat = sat.data(); p.mc = mc.data(); p.status = status.data();
  p.sa = reinterpret_cast<float*>(sa.data());
  p.R = (int)R; p.C = (int)C; p.mode = (int)h[3];
  p.wv = wv ? reinterpret_cast<mx_u16*>(wvb.data()) : nullptr;
  if (with_need) { p.need = need.data(); p.offs = offs.data(); p.E = (int)E; p.nw = (int)KB; }
  const int bpc = (int)h[4];
  const bool pf = bpc == 2;
  // (PF: two walkers, so that a row block's column blocks alternate between CTAs, each of which
  // goes round its loop and prefetches)
  const simt_dim3 grid{pf ? 2u : (unsigned)((NS + bpc - 1) / bpc), (unsigned)((R + 127) / 128), 1};
  if ((bpc != 1 && bpc != 4 && !pf) || (wv && bpc == 4)) { fprintf(stderr, "blocks per CTA: 1, 2 (PF) or 4 (wv: 1 or 2)\n"); return 2; }
  const int noq = (int)h[6];
  if (noq < 0 || noq > 5 || (noq && bpc == 4)) { fprintf(stderr, "noq: 0..5, one block per CTA\n"); return 2; }
  if (pf && !(wv && noq)) { fprintf(stderr, "the prefetching build is WV NOQ\n"); return 2; }
  const bool s_out = noq >= 4;   // the scales left out too
  if (s_out) p.s = nullptr;
  if (noq == 0 && wv && h[2] == 0) simt_launch(grid, 256, [&] { mx_quant_block_form<0, 1, 1>(p); });
  if (noq == 0 && wv && h[2] == 1) simt_launch(grid, 256, [&] { mx_quant_block_form<1, 1, 1>(p); });
  if (noq == 0 && !wv && bpc == 1 && h[2] == 0) simt_launch(grid, 256, [&] { mx_quant_block_form<0, 1>(p); });
  if (noq == 0 && !wv && bpc == 1 && h[2] == 1) simt_launch(grid, 256, [&] { mx_quant_block_form<1, 1>(p); });
  if (noq && wv && !pf && h[2] == 0) simt_launch(grid, 256, [&] { mx_quant_block_form<0, 1, 1, 1>(p); });
  if (noq && wv && !pf && h[2] == 1) simt_launch(grid, 256, [&] { mx_quant_block_form<1, 1, 1, 1>(p); });
  if (pf && h[2] == 0) simt_launch(grid, 256, [&] { mx_quant_block_form<0, 1, 1, 1, 1>(p); });
  if (pf && h[2] == 1) simt_launch(grid, 256, [&] { mx_quant_block_form<1, 1, 1, 1, 1>(p); });
  if (noq && !wv && h[2] == 0) simt_launch(grid, 256, [&] { mx_quant_block_form<0, 1, 0, 1>(p); });
  if (noq && !wv && h[2] == 1) simt_launch(grid, 256, [&] { mx_quant_block_form<1, 1, 0, 1>(p); });
  if (noq == 2 || noq == 3 || noq == 5) {
    const int took[2] = {0, 5};   // a gate the chained GEMM took (flags 0, 5 residuals <= 10)
    MxPlainFromFormParams d{};
    d.q = q.data(); d.s = s.data(); d.q2 = q2.data(); d.s2 = sat.data(); d.mc = mc.data();   // (s2 transposed)
    d.st = s_out ? s2.data() : nullptr;
    d.gate = noq == 3 ? took : nullptr; d.limit = 10;
    d.R = (int)R; d.C = (int)C;
    // (a grid smaller than the blocks, so that the grid-stride loop goes round)
    if (h[2] == 0) simt_launch(simt_dim3{3, 1, 1}, 256, [&] { mx_plain_from_form<0>(d); });
    if (h[2] == 1) simt_launch(simt_dim3{3, 1, 1}, 256, [&] { mx_plain_from_form<1>(d); });
  }
  if (bpc == 4 && h[2] == 0) simt_launch(grid, 256, [&] { mx_quant_block_form<0, 4>(p); });
  if (bpc == 4 && h[2] == 1) simt_launch(grid, 256, [&] { mx_quant_block_form<1, 4>(p); });
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  for (auto* v : {&q, &s, &q2, &s2, &at, &sat, &mc, &sa}) fwrite(v->data(), 1, v->size(), out);
  fwrite(status.data(), 4, 2, out);
  fwrite(wvb.data(), 1, wvb.size(), out);
  fclose(out);
  return 0;
}
