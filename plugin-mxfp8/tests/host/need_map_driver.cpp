// need_map_driver.cpp — runs mx_chain_need_map (cuda/include/mx_chain_need.cuh) on the host
// through simt.hpp, for tests/block_form_host.rs.
// Usage: driver IN OUT. IN: 4 little-endian i64 (rows, n: rows per expert, slots, nw: words per
// expert), then cnt[rows] (i32) and res[rows slots] as (i32 k, f32 v).
// OUT: need[rows / n][nw] (u32; zeroed before the launch, as the host does).
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_fp8_shift.cuh"
#include "mx_reencode.cuh"
#include "mx_chain_need.cuh"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[4];
  if (!in || fread(h, 8, 4, in) != 4) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 rows = h[0], n = h[1], slots = h[2], nw = h[3];
  if (n <= 0 || rows % n != 0) { fprintf(stderr, "rows: a multiple of n\n"); return 2; }
  std::vector<int> cnt(rows);
  std::vector<MxRes> res(rows * slots);
  if (fread(cnt.data(), 4, cnt.size(), in) != cnt.size() || fread(res.data(), sizeof(MxRes), res.size(), in) != res.size()) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  fclose(in);
  std::vector<mx_u32> need(rows / n * nw, 0u);
  MxNeedMapParams p{};
  p.res = res.data(); p.cnt = cnt.data(); p.need = need.data();
  p.rows = rows; p.n = (int)n; p.slots = (int)slots; p.nw = (int)nw;
  // (two CTAs, fewer threads than rows: the grid-stride loop goes round)
  simt_launch(simt_dim3{2, 1, 1}, 256, [&] { mx_chain_need_map<>(p); });
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  fwrite(need.data(), 4, need.size(), out);
  fclose(out);
  return 0;
}
