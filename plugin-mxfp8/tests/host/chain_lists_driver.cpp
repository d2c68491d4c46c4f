// chain_lists_driver.cpp — runs mx_chain_lists (cuda/include/mx_reencode_pair.cuh) on the host
// through simt.hpp, for tests/chain_lists_host.rs.
// Usage: driver IN OUT. IN: 12 little-endian i64 (R, K, rpe, rdv, ise, isr, isc, slots, fmt,
// rpw, nscales, 0), then q (R K bytes), s (nscales bytes), mc (ceil(K / 128) R bytes).
// OUT: status[2], cnt[R] (i32; poisoned before the launch), then res[R slots] as (i32 k, f32 v).
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_quant_blocks.cuh"
#include "mx_fp8_shift.cuh"
#include "mx_reencode.cuh"
#include "mx_reencode_pair.cuh"

template <class T> static bool get(FILE* f, std::vector<T>& v, size_t n) {
  v.resize(n);
  return n == 0 || fread(v.data(), sizeof(T), n, f) == n;
}

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  std::vector<mx_i64> h;
  if (!in || !get(in, h, 12)) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const mx_i64 R = h[0], K = h[1], ns = (K + 127) / 128, slots = h[7];
  std::vector<mx_u8> q, s, mc;
  if (!get(in, q, R * K) || !get(in, s, h[10]) || !get(in, mc, ns * R)) { fprintf(stderr, "short input\n"); return 2; }
  fclose(in);
  std::vector<int> status(2, 0), cnt(R, 0x7F7F7F7F);
  std::vector<MxRes> res(R * slots, MxRes{-1, -1.0f});
  MxChainListParams p{};
  p.q = q.data(); p.s = s.data(); p.mc = mc.data();
  p.res = res.data(); p.cnt = cnt.data(); p.status = status.data();
  p.R = R; p.ise = h[4]; p.isr = h[5]; p.isc = h[6];
  p.K = (int)K; p.rpe = (int)h[2]; p.rdv = (int)h[3]; p.slots = (int)slots; p.rpw = (int)h[9];
  const unsigned grid = (unsigned)((R + 8 * p.rpw - 1) / (8 * p.rpw));
  if (h[8] == 0) simt_launch({grid, 1, 1}, 256, [&] { mx_chain_lists<0>(p); });
  else simt_launch({grid, 1, 1}, 256, [&] { mx_chain_lists<1>(p); });
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 2;
  fwrite(status.data(), 4, 2, out);
  fwrite(cnt.data(), 4, R, out);
  fwrite(res.data(), sizeof(MxRes), res.size(), out);
  fclose(out);
  return 0;
}
