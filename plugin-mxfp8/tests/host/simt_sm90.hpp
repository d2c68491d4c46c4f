// simt_sm90.hpp — the Hopper pieces of a kernel (mbarriers, TMA, bulk copies, named barriers,
// wgmma) emulated on the host over simt.hpp, so that the TMA GEMM kernels run without a GPU.
//
// Include after simt.hpp, before the kernel headers (it includes mx_wgmma.cuh). The model:
// - Shared memory: each CTA's dynamic shared memory is an arena (simt_launch's dyn_smem bytes,
//   poisoned), and a 32-bit shared address below 2^18 is an offset in it (wgmma descriptors
//   hold 18 bits). Static __shared__ variables stay host statics: their shared address is the
//   low 32 bits of the host address, resolved with the high bits all of this program's statics
//   share (smem_u32 aborts where that does not hold). Mbarriers are used by pointer.
// - mbarriers: pending arrivals, expected transaction bytes and the phase, under one lock per
//   CTA; a wait blocks on a condition variable and aborts with a message after SIMT_TIMEOUT_S.
// - TMA loads and stores and bulk copies complete when issued: the bytes move, then the
//   transaction bytes complete on the mbarrier. Loads zero-fill outside the tensor map's
//   extent and place rows in the 128-byte swizzle (16-byte chunk c of the row at shared
//   address a goes to c ^ ((a >> 7) & 7)); stores clip.
// - wgmma runs when issued, for its whole warpgroup: the 128 threads meet, one checks that
//   they agree on the descriptors and computes D, all go on; fence, commit and wait are
//   no-ops. Operands are read through the descriptor (start, LBO, SBO, no swizzle or 128-byte
//   swizzle, K-major), D goes to each thread's fragment registers (m64nN: row 16 * warp +
//   lane / 4 (+8), column 8j + 2 (lane % 4) (+1) in d[4j .. 4j+3]). A k32 FP8 (k16 bf16) partial
//   is the sum of its products in double, rounded once to FP32 (the tensor core's own
//   internal rounding is not specified; what these tests check is everything around it:
//   layouts, descriptors, pipeline, promotion, epilogue).
// - A tensor map (MxTmap) holds the harness's own fields (simt_tmap_2d), not the driver's.
// Not emulated (abort when reached): clusters, multicast, 64/32-byte swizzles.
#pragma once
#include "mx_wgmma.cuh"

[[noreturn]] inline void simt_fail(const char* what) {
  fprintf(stderr, "simt_sm90.hpp: %s\n", what);
  std::abort();
}

// ---- shared memory ----
constexpr mx_u32 SIMT_ARENA_LIMIT = 1u << 18;
// The high 32 bits of the program's static storage (where static __shared__ variables live).
inline std::uintptr_t simt_static_hi() {
  static int anchor;
  return reinterpret_cast<std::uintptr_t>(&anchor) >> 32;
}
inline mx_u8* simt_smem_at(mx_u32 a, size_t bytes) {
  if (a >= SIMT_ARENA_LIMIT) return reinterpret_cast<mx_u8*>((simt_static_hi() << 32) | a);   // a static
  if ((size_t)a + bytes > simt_cta->smem_bytes) {
    fprintf(stderr, "simt_sm90.hpp: shared address %u + %zu bytes past the %zu bytes of dynamic shared memory\n", a, bytes,
            simt_cta->smem_bytes);
    std::abort();
  }
  return simt_cta->smem + a;
}
inline mx_u32 smem_u32(const void* p) {
  const mx_u8* b = static_cast<const mx_u8*>(p);
  if (b >= simt_cta->smem && b <= simt_cta->smem + simt_cta->smem_bytes) return (mx_u32)(b - simt_cta->smem);
  const std::uintptr_t u = reinterpret_cast<std::uintptr_t>(p);
  if ((u >> 32) != simt_static_hi() || (mx_u32)u < SIMT_ARENA_LIMIT)
    simt_fail("smem_u32 of a pointer that is neither in the dynamic shared memory nor a static __shared__ variable");
  return (mx_u32)u;
}
inline float lds_f32(mx_u32 a) { float v; std::memcpy(&v, simt_smem_at(a, 4), 4); return v; }
inline float2 lds_f32x2(mx_u32 a) { float2 v; std::memcpy(&v, simt_smem_at(a, 8), 8); return v; }
inline float4 lds_f32x4(mx_u32 a) { float4 v; std::memcpy(&v, simt_smem_at(a, 16), 16); return v; }
inline void st_shared_b32(mx_u32 a, mx_u32 v) { std::memcpy(simt_smem_at(a, 4), &v, 4); }
inline void st_shared_v4_splat(mx_u32 a, mx_u32 v) {
  for (int i = 0; i < 4; ++i) std::memcpy(simt_smem_at(a + 4 * i, 4), &v, 4);
}
// The 128-byte swizzle of a shared address (TMA SWIZZLE_128B, wgmma layout type 1).
inline mx_u32 simt_sw128(mx_u32 a) { return a ^ (((a >> 7) & 7u) << 4); }

// ---- mbarriers ----
inline SimtMbar& simt_mbar(const mx_u64* bar) {   // (sync_m held)
  auto it = simt_cta->mbars.find(bar);
  if (it == simt_cta->mbars.end()) simt_fail("mbarrier used before mbar_init");
  return it->second;
}
inline void simt_mbar_update(const mx_u64* bar, int arrivals, mx_i64 tx) {
  if (arrivals) simt_jitter();
  std::lock_guard<std::mutex> lk(simt_cta->sync_m);
  SimtMbar& m = simt_mbar(bar);
  m.pending -= arrivals;
  m.tx += tx;
  if (m.pending < 0) simt_fail("more arrivals on an mbarrier than its count in one phase");
  if (m.pending == 0 && m.tx == 0) {
    m.phase ^= 1;
    m.pending = m.count;
    simt_cta->sync_cv.notify_all();
  }
}
inline void mbar_init(mx_u64* bar, mx_u32 count) {
  std::lock_guard<std::mutex> lk(simt_cta->sync_m);
  simt_cta->mbars[bar] = SimtMbar{(int)count, (int)count, 0, 0};
}
inline void mbar_arrive(mx_u64* bar) { simt_mbar_update(bar, 1, 0); }
inline void mbar_arrive_expect_tx(mx_u64* bar, mx_u32 bytes) { simt_mbar_update(bar, 1, bytes); }
inline void mbar_expect_tx(mx_u64* bar, mx_u32 bytes) { simt_mbar_update(bar, 0, bytes); }
inline void simt_complete_tx(mx_u64* bar, mx_u32 bytes) { simt_mbar_update(bar, 0, -(mx_i64)bytes); }
// The phase with this parity has completed: the barrier is in the other one.
inline bool mbar_test(mx_u64* bar, mx_u32 parity) {
  std::lock_guard<std::mutex> lk(simt_cta->sync_m);
  return simt_mbar(bar).phase != (parity & 1);
}
inline void mbar_wait(mx_u64* bar, mx_u32 parity) {
  std::unique_lock<std::mutex> lk(simt_cta->sync_m);
  if (!simt_cta->sync_cv.wait_for(lk, std::chrono::seconds(SIMT_TIMEOUT_S),
                                  [&] { return simt_mbar(bar).phase != (parity & 1); })) {
    const SimtMbar& m = simt_mbar(bar);
    fprintf(stderr, "simt_sm90.hpp: thread %d waited %d s on an mbarrier's phase %u (pending arrivals %d of %d, tx bytes %lld)\n",
            simt_tid, SIMT_TIMEOUT_S, parity & 1, m.pending, m.count, (long long)m.tx);
    std::abort();
  }
}
inline void mbar_wait_parked(mx_u64* bar, mx_u32 parity) { mbar_wait(bar, parity); }
// (cp.async copies complete when issued here, so the arrival is immediate.)
inline void cp_async_mbar_arrive_noinc(mx_u64* bar) { mbar_arrive(bar); }

// ---- fences, registers, named barriers, sleeps: ordering comes from the locks above ----
inline void fence_proxy_async_smem() {}
inline void fence_mbarrier_init() {}
template <int N> inline void setmaxnreg_inc() {}
template <int N> inline void setmaxnreg_dec() {}
inline void __nanosleep(unsigned) { std::this_thread::yield(); }
inline void named_bar_sync(int id, int threads) {
  SimtBarrier* b;
  {
    std::lock_guard<std::mutex> lk(simt_cta->sync_m);
    auto& slot = simt_cta->named[id];
    if (!slot) slot = std::make_unique<SimtBarrier>(threads, "named barrier (bar.sync)");
    b = slot.get();
  }
  b->arrive_and_wait();
}

// ---- cp.async (16 bytes, zero-filled past src_bytes), complete when issued ----
inline void cp_async16(mx_u32 dst, const void* src, mx_u32 src_bytes) {
  mx_u8* d = simt_smem_at(dst, 16);
  std::memset(d, 0, 16);
  std::memcpy(d, src, src_bytes < 16 ? src_bytes : 16);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}

// ---- bf16 ----
// Round to nearest even; a NaN becomes the canonical 0x7FFF.
inline mx_u32 simt_bf16_rn(float x) {
  const mx_u32 u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
inline mx_u32 pack_bf16x2(float lo, float hi) { return simt_bf16_rn(lo) | (simt_bf16_rn(hi) << 16); }

// ---- TMA tensor maps, loads and stores; bulk copies ----
struct SimtTmap { const mx_u8* base; mx_u64 inner, rows, ld, elem, box_inner, box_rows, swizzle128; };
static_assert(sizeof(SimtTmap) <= sizeof(MxTmap), "a SimtTmap fits in an MxTmap");
// A 2D map over `rows` rows of `inner` elements of `elem` bytes, `ld` bytes apart; boxes of
// box_rows x box_inner elements, 128-byte swizzled or not.
inline MxTmap simt_tmap_2d(const void* base, int elem, mx_u64 inner, mx_u64 rows, mx_u64 ld, int box_inner, int box_rows,
                           bool swizzle128) {
  if (swizzle128 && box_inner * elem != 128) simt_fail("simt_tmap_2d: a 128-byte swizzle needs 128-byte box rows");
  MxTmap m{};
  const SimtTmap t{static_cast<const mx_u8*>(base), inner, rows, ld, (mx_u64)elem, (mx_u64)box_inner, (mx_u64)box_rows,
                   swizzle128 ? 1u : 0u};
  std::memcpy(&m, &t, sizeof t);
  return m;
}
inline SimtTmap simt_tmap(const MxTmap* map) { SimtTmap t; std::memcpy(&t, map, sizeof t); return t; }
// Box element (r, i) <-> its shared address from the box at dst.
inline mx_u32 simt_box_addr(const SimtTmap& t, mx_u32 dst, mx_u64 r, mx_u64 i) {
  const mx_u32 a = dst + (mx_u32)(r * t.box_inner * t.elem + i * t.elem);
  return t.swizzle128 ? simt_sw128(a) : a;
}
inline void tma_load_2d(mx_u32 dst, const MxTmap* map, int c0, int c1, mx_u64* bar) {
  const SimtTmap t = simt_tmap(map);
  if (dst % (t.swizzle128 ? 1024 : 128) != 0) simt_fail("tma_load_2d: destination not aligned (1024 B swizzled, else 128 B)");
  for (mx_u64 r = 0; r < t.box_rows; ++r)
    for (mx_u64 i = 0; i < t.box_inner; ++i) {
      const mx_i64 gr = (mx_i64)c1 + (mx_i64)r, gi = (mx_i64)c0 + (mx_i64)i;
      mx_u8* d = simt_smem_at(simt_box_addr(t, dst, r, i), t.elem);
      if (gr < 0 || gi < 0 || gr >= (mx_i64)t.rows || gi >= (mx_i64)t.inner) std::memset(d, 0, t.elem);
      else std::memcpy(d, t.base + gr * t.ld + gi * t.elem, t.elem);
    }
  simt_complete_tx(bar, (mx_u32)(t.box_rows * t.box_inner * t.elem));
}
inline void tma_store_2d(const MxTmap* map, mx_u32 src, int c0, int c1) {
  const SimtTmap t = simt_tmap(map);
  for (mx_u64 r = 0; r < t.box_rows; ++r)
    for (mx_u64 i = 0; i < t.box_inner; ++i) {
      const mx_i64 gr = (mx_i64)c1 + (mx_i64)r, gi = (mx_i64)c0 + (mx_i64)i;
      if (gr < 0 || gi < 0 || gr >= (mx_i64)t.rows || gi >= (mx_i64)t.inner) continue;
      std::memcpy(const_cast<mx_u8*>(t.base) + gr * t.ld + gi * t.elem, simt_smem_at(simt_box_addr(t, src, r, i), t.elem), t.elem);
    }
}
inline void tma_prefetch_desc(const MxTmap*) {}
inline void bulk_load(mx_u32 dst, const void* src, mx_u32 bytes, mx_u64* bar) {
  if (dst % 16 != 0 || bytes % 16 != 0 || reinterpret_cast<std::uintptr_t>(src) % 16 != 0)
    simt_fail("bulk_load: address or size not a multiple of 16 bytes");
  std::memcpy(simt_smem_at(dst, bytes), src, bytes);
  simt_complete_tx(bar, bytes);
}
inline void bulk_commit() {}
template <int N> inline void bulk_wait_read() {}
template <int N> inline void bulk_wait() {}

// ---- clusters: not emulated ----
inline void tma_load_2d_multicast(mx_u32, const MxTmap*, int, int, mx_u64*, mx_u16) { simt_fail("TMA multicast is not emulated"); }
inline mx_u32 cluster_ctarank() { simt_fail("clusters are not emulated"); }
inline void mbar_arrive_cluster(mx_u64*, mx_u32) { simt_fail("clusters are not emulated"); }
inline void cluster_sync() { simt_fail("clusters are not emulated"); }

// ---- wgmma ----
// Exact value of an operand element: 0 = E4M3, 1 = E5M2 (bytes), 2 = bf16 (two bytes).
inline double simt_operand_value(const mx_u8* p, int type) {
  if (type == 2) {
    mx_u16 h;
    std::memcpy(&h, p, 2);
    return (double)__uint_as_float((mx_u32)h << 16);
  }
  const mx_u32 c = *p, sign = c >> 7;
  double v;
  if (type == 0) {
    const int e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    v = e == 0 ? std::ldexp((double)m, -9) : std::ldexp((double)(8 + m), e - 10);
  } else {
    const int e = (c >> 2) & 31, m = c & 3;
    if (e == 31) return m ? NAN : (sign ? -INFINITY : INFINITY);
    v = e == 0 ? std::ldexp((double)m, -16) : std::ldexp((double)(4 + m), e - 17);
  }
  return sign ? -v : v;
}
// Shared address of byte `kb` (0..31) of row `row` of a K-major operand under descriptor `desc`.
inline mx_u32 simt_desc_addr(mx_u64 desc, int row, int kb) {
  const mx_u32 start = (mx_u32)(desc & 0x3FFF) << 4, lbo = (mx_u32)((desc >> 16) & 0x3FFF) << 4,
               sbo = (mx_u32)((desc >> 32) & 0x3FFF) << 4;
  switch ((int)(desc >> 62)) {
    case 0: return start + (row / 8) * sbo + (kb / 16) * lbo + (row % 8) * 16 + kb % 16;
    case 1: return simt_sw128(start + (row / 8) * sbo + (row % 8) * 128 + kb);
    default: simt_fail("wgmma: 64- and 32-byte swizzled operands are not emulated");
  }
}
// D (m64 x n) = A * B (+ D when acc): A's 64 and B's n rows of 32 bytes (k32 FP8 or k16 bf16).
inline void simt_wgmma(float* d, mx_u64 da, mx_u64 db, int n, int ta, int tb, int acc) {
  const int t = simt_tid, wg = t >> 7, lt = t & 127;
  simt_cta->wslots[t] = SimtWgmmaSlot{d, da, db, n, ta, tb, acc};
  if (simt_cta->wgs[wg]->arrive_and_wait() != 128) simt_fail("a wgmma reached by fewer than 128 threads of its warpgroup");
  if (lt == 0) {
    const SimtWgmmaSlot* s = &simt_cta->wslots[wg * 128];
    for (int i = 1; i < 128; ++i)
      if (s[i].da != da || s[i].db != db || s[i].n != n || s[i].ta != ta || s[i].tb != tb || s[i].acc != acc)
        simt_fail("the threads of a warpgroup issued different wgmmas (descriptors, shape or types)");
    const int es = ta == 2 ? 2 : 1, K = 32 / es;
    std::vector<double> a(64 * K), b((size_t)n * K);
    for (int r = 0; r < 64; ++r)
      for (int k = 0; k < K; ++k) a[r * K + k] = simt_operand_value(simt_smem_at(simt_desc_addr(da, r, k * es), es), ta);
    for (int r = 0; r < n; ++r)
      for (int k = 0; k < K; ++k) b[r * K + k] = simt_operand_value(simt_smem_at(simt_desc_addr(db, r, k * es), es), tb);
    for (int m = 0; m < 64; ++m)
      for (int c = 0; c < n; ++c) {
        double sum = 0.0;
        for (int k = 0; k < K; ++k) sum += a[m * K + k] * b[c * K + k];
        const int lane = (m % 8) * 4 + (c % 8) / 2;
        float& out = s[(m / 16) * 32 + lane].d[4 * (c / 8) + 2 * ((m % 16) / 8) + (c % 2)];
        out = acc ? (float)((double)out + sum) : (float)sum;
      }
  }
  simt_cta->wgs[wg]->arrive_and_wait();
}
inline void wgmma_fence() {}
inline void wgmma_commit() {}
template <int N> inline void wgmma_wait() {}
#define SIMT_WGMMA_FP8(NAME, N, FA, FB) \
  template <> inline void NAME<FA, FB>(float* d, mx_u64 da, mx_u64 db) { simt_wgmma(d, da, db, N, FA, FB, 0); }
#define SIMT_WGMMA_FP8_ALL(NAME, N) \
  SIMT_WGMMA_FP8(NAME, N, 0, 0) SIMT_WGMMA_FP8(NAME, N, 0, 1) SIMT_WGMMA_FP8(NAME, N, 1, 0) SIMT_WGMMA_FP8(NAME, N, 1, 1)
SIMT_WGMMA_FP8_ALL(wgmma_m64n128k32, 128)
SIMT_WGMMA_FP8_ALL(wgmma_m64n64k32, 64)
SIMT_WGMMA_FP8_ALL(wgmma_m64n192k32_inplace, 192)
#undef SIMT_WGMMA_FP8_ALL
#undef SIMT_WGMMA_FP8
template <int FA, int FB, int SD> inline void wgmma_m64n128k32_inplace(float* d, mx_u64 da, mx_u64 db) {
  simt_wgmma(d, da, db, 128, FA, FB, SD);
}
inline void wgmma_m64n128k16_bf16_acc(float* d, mx_u64 da, mx_u64 db) { simt_wgmma(d, da, db, 128, 2, 2, 1); }
