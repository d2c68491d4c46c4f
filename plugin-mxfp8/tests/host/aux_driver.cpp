// aux_driver.cpp — runs the backend's helper kernels of cuda/mx_dequantize.cu on the host through
// simt.hpp, for tests/aux_host.rs: mx_dequantize (any layout, batched) and mx_dequantize16 (16-element
// chunks with the fast path; the host takes its software FP8 decode, the GPU the hardware
// conversion), the dequantize-to-BF16 path's expansion of MX operands (shapes a and b), and
// mx_transpose_u8 (word and byte paths), and mx_wgrad_relayout (pre-quantized wgrad operands
// into the GEMM's padded transposed layout; blocks of 32 x 8 threads).
// Usage: driver IN OUT. IN: 12 little-endian i64 (KERNEL: 0 mx_dequantize, 1 mx_dequantize16,
// 2 mx_transpose_u8; OUT_BF16, FMT, BATCH, R, C, RDIV, CDIV, SRS, SBS, SCS, the scale count),
// then q (BATCH x R x C bytes) and the scale bytes. OUT: the output (BATCH x R x C values, bf16
// or f32; transpose: BATCH x C x R bytes), poisoned with 0xA5 first.
// KERNEL 3 (mx_wgrad_relayout) reads the header as (3, 0, 0, E, R, P, MPAD, 0, 0, 0, 0, scale
// count): q [R][P], s [ceil(R / 32)][P], then tbl (E x 4 i32: seg, shift, start, rows); OUT: qt
// [P][MPAD] and st [P][MPAD / 32], poisoned first.
#include "simt.hpp"
#include <cstdio>
#include "../../cuda/mx_dequantize.cu"

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: driver IN OUT\n"); return 2; }
  FILE* in = fopen(argv[1], "rb");
  mx_i64 h[12];
  if (!in || fread(h, 8, 12, in) != 12) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  const int kernel = (int)h[0], obf = (int)h[1], fmt = (int)h[2];
  const mx_i64 B = kernel == 3 ? 1 : h[3], R = h[4], C = h[5], n = B * R * C;
  std::vector<mx_u8> q(n), s(h[11]);
  if (fread(q.data(), 1, n, in) != (size_t)n || fread(s.data(), 1, s.size(), in) != s.size()) {
    fprintf(stderr, "short input\n");
    return 2;
  }
  std::vector<int> tbl(kernel == 3 ? 4 * h[3] : 0);
  if (fread(tbl.data(), 4, tbl.size(), in) != tbl.size()) { fprintf(stderr, "short table\n"); return 2; }
  fclose(in);
  const mx_i64 mpad = h[6];
  const size_t out_bytes = kernel == 3 ? C * mpad + C * (mpad / 32) : kernel == 2 ? n : n * (obf ? 2 : 4);
  std::vector<mx_u8> out(out_bytes + 16, 0xA5);   // (+16: room to align the output)
  mx_u8* o = out.data() + (16 - reinterpret_cast<std::uintptr_t>(out.data()) % 16) % 16;
  const int rdiv = (int)h[6], cdiv = (int)h[7];
  switch (kernel) {
    case 0:   // the backend's grid (bf16_path.rs): x = ceil(R*C/256) (capped), y = batch
      simt_launch(simt_dim3{(unsigned)std::min<mx_i64>((R * C + 255) / 256, 3), (unsigned)B, 1}, 256,
                  [&] { mx_dequantize(q.data(), s.data(), o, obf, fmt, R, C, rdiv, cdiv, h[8], h[9], h[10]); });
      break;
    case 1:   // x = 16-element column chunks / 128, y = rows / 2 (here fewer: rows in rounds)
      if (B != 1 || C % 16) { fprintf(stderr, "mx_dequantize16: batch 1, C %% 16 == 0\n"); return 2; }
      simt_launch(simt_dim3{(unsigned)((C / 16 + 127) / 128), (unsigned)std::min<mx_i64>((R + 1) / 2, 3), 1}, 128,
                  [&] { mx_dequantize16(q.data(), s.data(), o, obf, fmt, R, C, rdiv, cdiv, h[8]); });
      break;
    case 2:
      simt_launch(simt_dim3{(unsigned)((C + 127) / 128), (unsigned)((R + 127) / 128), (unsigned)B}, 256,
                  [&] { mx_transpose_u8(q.data(), o, (int)R, (int)C); });
      break;
    case 3:   // wgrad.rs: grid (mpad / 32, ceil(P / 32)), block (32, 8)
      simt_launch(simt_dim3{(unsigned)(mpad / 32), (unsigned)((C + 31) / 32), 1}, simt_dim3{32, 8, 1}, [&] {
        mx_wgrad_relayout(q.data(), s.data(), (int)C, tbl.data(), (int)h[3], o, o + C * mpad, (int)mpad);
      });
      break;
    default: fprintf(stderr, "no kernel %d\n", kernel); return 2;
  }
  FILE* f = fopen(argv[2], "wb");
  if (!f) return 2;
  fwrite(o, 1, out_bytes, f);
  fclose(f);
  return 0;
}
