// scale_tables_driver.cpp — runs mx_scales_to_f32 and mx_scales_to_f32_stages
// (cuda/include/mx_scale_tables.cuh) on the host through simt.hpp, for
// tests/scale_tables_host.rs.
// Usage: driver IN OUT. IN: 16 little-endian i64 (kernel: 0 general / 1 stages, batch, R, C,
// Rp, Cp, rdv, ise, isr, isc, ose, osr, ocg, gate: 0 none / else the status words' flags + 1,
// the gate's count, limit), then ceil(nin) scale bytes (nin = batch * ise, at least 1 byte past
// the last one read). OUT: batch * ose floats, poisoned (0xFFBADBAD) before the launch.
#include "simt.hpp"
#include <cstdio>
#include <cstring>
#include "mx_numerics.cuh"
#include "mx_scale_tables.cuh"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[16];
  if (!in || fread(h, 8, 16, in) != 16) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 kernel = h[0], batch = h[1], R = h[2], C = h[3], Rp = h[4], Cp = h[5], rdv = h[6];
  const mx_i64 ise = h[7], isr = h[8], isc = h[9], ose = h[10], osr = h[11], ocg = h[12];
  std::vector<mx_u8> s(batch * ise);
  if (fread(s.data(), 1, s.size(), in) != s.size()) { fprintf(stderr, "short input\n"); return 2; }
  fclose(in);
  std::vector<mx_u32> out(batch * ose, 0xFFBADBADu);
  int status[2] = {(int)(h[13] > 0 ? h[13] - 1 : 0), (int)h[14]};
  const int* gate = h[13] > 0 ? status : nullptr;
  const int limit = (int)h[15];
  float* o = reinterpret_cast<float*>(out.data());
  if (kernel == 0) {
    const simt_dim3 grid{(unsigned)((Rp * Cp + 255) / 256), (unsigned)batch, 1};
    simt_launch(grid, 256, [&] {
      mx_scales_to_f32_body(s.data(), ise, isr, isc, o, ose, osr, ocg, (int)R, (int)C, (int)Rp, (int)Cp, (int)rdv,
                            gate, limit);
    });
  } else {
    const simt_dim3 grid{(unsigned)((Rp + 31) / 32), (unsigned)((Cp + 127) / 128), (unsigned)batch};
    simt_launch(grid, 256, [&] {
      mx_scales_to_f32_stages_body(s.data(), ise, isr, isc, o, ose, (int)R, (int)C, (int)Rp, (int)Cp, (int)rdv,
                                   gate, limit);
    });
  }
  FILE* f = fopen(argv[2], "wb");
  if (!f) return 2;
  fwrite(out.data(), 4, out.size(), f);
  fclose(f);
  return 0;
}
