// block_driver.cpp — runs mx_reencode_block (cuda/include/mx_reencode_block.cuh) on the host
// through simt.hpp, for tests/reencode_block_host.rs.
// Usage: driver IN OUT. IN: 3 little-endian i64 (R, C, fmt), then the operand's bytes q ([R][C])
// and scales s ([R][ceil(C / 32)]). OUT, every buffer poisoned with 0xA5 before the launch: q2,
// s2, at, sat, mc, then status[2] (i32).
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_fp8_shift.cuh"
#include "mx_reencode.cuh"
#include "mx_reencode_block.cuh"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[3];
  if (!in || fread(h, 8, 3, in) != 3) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 R = h[0], C = h[1], KB = (C + 31) / 32, NS = (C + 127) / 128;
  std::vector<mx_u8> q(R * C), s(R * KB);
  if (fread(q.data(), 1, q.size(), in) != q.size() || fread(s.data(), 1, s.size(), in) != s.size()) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  fclose(in);
  auto poisoned = [](mx_i64 n) { return std::vector<mx_u8>(n, 0xA5); };
  std::vector<mx_u8> q2 = poisoned(R * C), s2 = poisoned(R * KB), at = poisoned(C * R), sat = poisoned(KB * R),
                     mc = poisoned(NS * R);
  std::vector<int> status(2, 0);
  MxReencodeBlockParams p{};
  p.q = q.data(); p.s = s.data(); p.q2 = q2.data(); p.s2 = s2.data(); p.at = at.data(); p.sat = sat.data();
  p.mc = mc.data(); p.status = status.data(); p.R = (int)R; p.C = (int)C;
  const simt_dim3 grid{(unsigned)NS, (unsigned)((R + 127) / 128), 1};
  if (h[2] == 0) simt_launch(grid, 256, [&] { mx_reencode_block<0>(p); });
  else simt_launch(grid, 256, [&] { mx_reencode_block<1>(p); });
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  for (auto* v : {&q2, &s2, &at, &sat, &mc}) fwrite(v->data(), 1, v->size(), out);
  fwrite(status.data(), 4, 2, out);
  fclose(out);
  return 0;
}
