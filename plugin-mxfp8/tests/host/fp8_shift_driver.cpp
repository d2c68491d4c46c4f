// fp8_shift_driver.cpp — mx_fp8_shift4 (cuda/include/mx_fp8_shift.cuh) on the host, for
// tests/fp8_shift_host.rs: checks every byte in every position of a word for d < 300 against
// the byte rule, then prints the table "T fmt d byte out miss" (d < 64) the test compares with
// the CPU reference.
#include "simt.hpp"
#include <cstdio>
#include "mx_numerics.cuh"
#include "mx_fp8_shift.cuh"

static mx_u32 rng = 12345u;
static mx_u32 next() { rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5; return rng; }

// The rule mx_fp8_shift4 implements, byte by byte.
template <int FMT> static mx_u32 rule(mx_u32 b, mx_u32 d, bool& ok) {
  constexpr int MB = MxFmt<FMT>::mbits;
  ok = true;
  if (d == 0 || (b & 0x7Fu) == 0) return b;
  if (((b & 0x7Fu) >> MB) > d) return b - (d << MB);
  return mx_fp8_shift_exact<FMT>(b, d, ok);
}

template <int FMT> static int check() {
  constexpr int MB = MxFmt<FMT>::mbits;
  constexpr mx_u32 EMAX = FMT == 0 ? 15u : 31u;   // E5M2's E = 31 bytes are Inf/NaN
  long bad = 0, n = 0;
  for (mx_u32 d = 0; d < 300; ++d)
    for (mx_u32 b = 0; b < 256; ++b)
      for (int j = 0; j < 4; ++j) {
        mx_u32 w = next();
        if (next() & 1u) w &= 0x80808080u | (next() & 0x0F0F0F0Fu);   // small and zero neighbours too
        w = (w & ~(0xFFu << (8 * j))) | (b << (8 * j));
        mx_u32 miss;
        const mx_u32 out = mx_fp8_shift4<FMT>(w, d, miss);
        for (int i = 0; i < 4; ++i) {
          const mx_u32 bi = (w >> (8 * i)) & 0xFFu;
          bool ok;
          const mx_u32 want = rule<FMT>(bi, d, ok);
          ++n;
          if (((out >> (8 * i)) & 0xFFu) != want || (((miss >> i) & 1u) != 0) == ok) {
            if (bad++ < 10) printf("MISMATCH fmt %d d %u word %08x byte %d: got %02x miss %u, want %02x ok %d\n",
                                   FMT, d, w, i, (out >> (8 * i)) & 0xFFu, (miss >> i) & 1u, want, (int)ok);
          }
          // the fast path is exact: the same byte as the exact route on finite bytes
          const mx_u32 E = (bi & 0x7Fu) >> MB;
          bool ok2;
          if (d > 0 && (bi & 0x7Fu) != 0 && E > d && (FMT == 0 || E < EMAX) &&
              (mx_fp8_shift_exact<FMT>(bi, d, ok2) != want || !ok2)) {
            if (bad++ < 10) printf("MISMATCH fmt %d d %u byte %02x: fast path %02x is not the exact route's\n", FMT, d, bi, want);
          }
        }
      }
  printf("checked fmt %d: %ld bytes, %ld mismatches\n", FMT, n, bad);
  return bad != 0;
}

template <int FMT> static void table() {
  for (mx_u32 d = 0; d < 64; ++d)
    for (mx_u32 b = 0; b < 256; ++b) {
      mx_u32 miss;
      const mx_u32 out = mx_fp8_shift4<FMT>(b << 16, d, miss);   // the byte in position 2
      printf("T %d %u %u %u %u\n", FMT, d, b, (out >> 16) & 0xFFu, (miss >> 2) & 1u);
    }
}

int main() {
  const int bad = check<0>() | check<1>();
  table<0>();
  table<1>();
  return bad;
}
