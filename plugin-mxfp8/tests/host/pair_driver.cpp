// pair_driver.cpp — runs mx_reencode_pair (cuda/include/mx_reencode_pair.cuh, E4M3) on the host
// through simt.hpp, for tests/reencode_pair_host.rs.
// Usage: driver IN OUT. IN: 7 little-endian i64 (E, R, C, copies, bf16, mode, noq), then either
// W's bytes q ([E][R][C]) and tile scales s ([E][R/32][C/32], rounded up), or (bf16 = 1, the
// mx_quantize_pair build, copies = 1) W in bf16 ([E][R][C]). noq (bf16 only): 0 the build that
// writes bt and btt whole, 1 the NOQ build (mx_quantize_pair_bf16_noq_e4m3), 2 the NOQ build then
// mx_plain_from_form (mx_plain_from_form.cuh, rpe > 0) on W (btt) and on Wᵀ (bt).
// OUT, every buffer poisoned with 0xA5 before the launch: q2, s2, qt2, st2, bt, btt (copies only,
// else empty), mc, mct, s and st (bf16 only, else empty), then status[2] and status_t[2] (i32).
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_quant_blocks.cuh"
#include "mx_fp8_shift.cuh"
#include "mx_reencode.cuh"
#include "mx_reencode_pair.cuh"
#include "mx_warp.cuh"
#include "mx_plain_from_form.cuh"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[7];
  if (!in || fread(h, 8, 7, in) != 7) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 E = h[0], R = h[1], C = h[2], NB = (R + 31) / 32, KB = (C + 31) / 32;
  const bool copies = h[3] != 0, from_bf16 = h[4] != 0;
  const int noq = (int)h[6];
  if (from_bf16 && !copies) { fprintf(stderr, "the bf16 build writes copies\n"); return 2; }
  if (noq < 0 || noq > 2 || (noq && !from_bf16)) { fprintf(stderr, "noq: 0..2, bf16 only\n"); return 2; }
  if (noq == 2 && (R % 32 || C % 32)) { fprintf(stderr, "mx_plain_from_form: R, C multiples of 32\n"); return 2; }
  auto poisoned = [](mx_i64 n) { return std::vector<mx_u8>(n, 0xA5); };
  std::vector<mx_u8> q(from_bf16 ? 0 : E * R * C), s(from_bf16 ? 0 : E * NB * KB);
  std::vector<mx_u16> x(from_bf16 ? E * R * C : 0);
  std::vector<mx_u8> s_out = poisoned(from_bf16 ? E * NB * KB : 0), st_out = poisoned(from_bf16 ? E * NB * KB : 0);
  const bool read_ok = from_bf16 ? fread(x.data(), 2, x.size(), in) == x.size()
                                 : fread(q.data(), 1, q.size(), in) == q.size() && fread(s.data(), 1, s.size(), in) == s.size();
  if (!read_ok) { fprintf(stderr, "short input\n"); return 2; }
  fclose(in);
  std::vector<mx_u8> q2 = poisoned(E * R * C), s2 = poisoned(E * NB * KB), qt2 = poisoned(E * C * R),
                     st2 = poisoned(E * KB * NB), bt = poisoned(copies ? E * C * R : 0),
                     btt = poisoned(copies ? E * R * C : 0), mc = poisoned((C + 127) / 128 * E * R),
                     mct = poisoned((R + 127) / 128 * E * C);
  std::vector<int> status(2, 0), status_t(2, 0);
  MxReencodePairParams p{};
  p.q = q.data(); p.s = s.data(); p.q2 = q2.data(); p.s2 = s2.data(); p.qt2 = qt2.data(); p.st2 = st2.data();
  p.bt = copies ? bt.data() : nullptr; p.btt = copies ? btt.data() : nullptr;
  p.mc = mc.data(); p.mct = mct.data(); p.status = status.data(); p.status_t = status_t.data();
  p.R = (int)R; p.C = (int)C;
  const simt_dim3 grid{(unsigned)((C + 127) / 128), (unsigned)((R + 127) / 128), (unsigned)E};
  MxQuantPairSrc src{x.data(), s_out.data(), st_out.data(), (int)h[5], 0};
  if (from_bf16 && noq) simt_launch(grid, 256, [&] { mx_reencode_pair<0, true, 1, 1>(p, &src); });
  else if (from_bf16) simt_launch(grid, 256, [&] { mx_reencode_pair<0, true, 1>(p, &src); });
  else if (copies) simt_launch(grid, 256, [&] { mx_reencode_pair<0, true>(p); });
  else simt_launch(grid, 256, [&] { mx_reencode_pair<0, false>(p); });
  if (noq == 2) {
    // W: E R rows of C bytes, its tile scales and form; Wᵀ: E C rows of R bytes, likewise.
    // (a grid smaller than the blocks, so that the grid-stride loop goes round)
    MxPlainFromFormParams w{}, wt{};
    w.q = btt.data(); w.s = s_out.data(); w.q2 = q2.data(); w.s2 = s2.data(); w.mc = mc.data();
    w.R = (int)(E * R); w.C = (int)C; w.rpe = (int)R;
    wt.q = bt.data(); wt.s = st_out.data(); wt.q2 = qt2.data(); wt.s2 = st2.data(); wt.mc = mct.data();
    wt.R = (int)(E * C); wt.C = (int)R; wt.rpe = (int)C;
    simt_launch(simt_dim3{3, 1, 1}, 256, [&] { mx_plain_from_form<0>(w); });
    simt_launch(simt_dim3{3, 1, 1}, 256, [&] { mx_plain_from_form<0>(wt); });
  }
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  for (auto* v : {&q2, &s2, &qt2, &st2, &bt, &btt, &mc, &mct, &s_out, &st_out}) fwrite(v->data(), 1, v->size(), out);
  fwrite(status.data(), 4, 2, out);
  fwrite(status_t.data(), 4, 2, out);
  fclose(out);
  return 0;
}
