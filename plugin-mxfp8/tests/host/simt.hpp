// simt.hpp — runs a CUDA kernel body on the host, for tests on machines without a GPU.
//
// The kernels' integer and warp logic (residual lists, byte shifts, shuffles, ballots, shared
// memory, barriers) is what these tests check; the tensor-core, TMA and PTX parts stay on the
// GPU: with MX_HOST_SIMT, mx_ptx.cuh declares its PTX wrappers without defining them, so a
// kernel that would run one fails to link. Each CTA runs on its own set of std::threads, one
// per CUDA thread, CTAs one after another, so a `__shared__` variable can be a function-local
// static (one CTA uses it at a time) and `__syncthreads` is a barrier over the CTA. Warp
// collectives (shuffles, ballot, reduce) meet at a per-warp barrier and exchange through a
// per-CTA buffer (warps are 32 consecutive linear thread indices, x fastest, as in CUDA):
// every lane of the warp must take part (full masks only, as in the kernels);
// one that does not (a divergent shuffle or __syncthreads) aborts the driver with a message
// after SIMT_TIMEOUT_S (30) s instead of hanging. A thread that returns from the kernel leaves
// its barriers, as an exited CUDA thread does.
// Not a model of the memory system: no races are found, only logic errors.
// simt_sm90.hpp adds the Hopper pieces (mbarriers, TMA, bulk copies, wgmma) over this.
#pragma once
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mx_types.cuh"

#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__
#define __restrict__ __restrict

struct simt_dim3 { unsigned x = 0, y = 0, z = 0; };
inline thread_local simt_dim3 threadIdx, blockIdx;
inline thread_local int simt_tid;   // the thread's linear index in its CTA (warps are 32 of them)
inline simt_dim3 blockDim, gridDim;

struct uint2 { mx_u32 x, y; };
struct float2 { float x, y; };
struct uint4 { mx_u32 x, y, z, w; };
struct float4 { float x, y, z, w; };
inline uint2 make_uint2(mx_u32 x, mx_u32 y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint4 make_uint4(mx_u32 x, mx_u32 y, mx_u32 z, mx_u32 w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline mx_u32 max(mx_u32 a, mx_u32 b) { return a > b ? a : b; }
inline mx_u32 min(mx_u32 a, mx_u32 b) { return a < b ? a : b; }
inline mx_i64 max(mx_i64 a, mx_i64 b) { return a > b ? a : b; }
inline mx_i64 min(mx_i64 a, mx_i64 b) { return a < b ? a : b; }
inline int __popc(mx_u32 x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((mx_u32)x); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float f) { int x; std::memcpy(&x, &f, 4); return x; }
inline float __uint_as_float(mx_u32 x) { float f; std::memcpy(&f, &x, 4); return f; }
inline mx_u32 __float_as_uint(float f) { mx_u32 x; std::memcpy(&x, &f, 4); return x; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }   // (cache hints mean nothing here)
template <class T> inline void __stcs(T* p, T v) { *p = v; }
// The host's float arithmetic rounds to nearest even, as the _rn intrinsics do.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline mx_u32 __float2uint_rz(float x) { return x <= 0.0f ? 0u : x >= 4294967296.0f ? 0xFFFFFFFFu : (mx_u32)x; }
using std::fmaxf;
using std::fminf;
inline mx_u32 __byte_perm(mx_u32 a, mx_u32 b, mx_u32 sel) {
  const mx_u64 v = ((mx_u64)b << 32) | a;
  mx_u32 r = 0;
  for (int i = 0; i < 4; ++i) r |= (mx_u32)((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xFFu) << (8 * i);
  return r;
}
// Per-byte comparisons: 0xFF in each byte where it holds, else 0.
template <class F> inline mx_u32 simt_vcmp4(mx_u32 a, mx_u32 b, F f) {
  mx_u32 r = 0;
  for (int i = 0; i < 32; i += 8) r |= f((a >> i) & 0xFFu, (b >> i) & 0xFFu) ? 0xFFu << i : 0u;
  return r;
}
inline mx_u32 __vcmpeq4(mx_u32 a, mx_u32 b) { return simt_vcmp4(a, b, [](mx_u32 x, mx_u32 y) { return x == y; }); }
inline mx_u32 __vcmpgeu4(mx_u32 a, mx_u32 b) { return simt_vcmp4(a, b, [](mx_u32 x, mx_u32 y) { return x >= y; }); }
inline mx_u32 __vcmpleu4(mx_u32 a, mx_u32 b) { return simt_vcmp4(a, b, [](mx_u32 x, mx_u32 y) { return x <= y; }); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline int atomicOr(int* p, int v) { return std::atomic_ref<int>(*p).fetch_or(v); }
inline mx_u32 atomicAdd(mx_u32* p, mx_u32 v) { return std::atomic_ref<mx_u32>(*p).fetch_add(v); }
inline mx_u32 atomicOr(mx_u32* p, mx_u32 v) { return std::atomic_ref<mx_u32>(*p).fetch_or(v); }

// SIMT_JITTER (environment, non-empty): after each barrier and before each mbarrier arrival a
// thread now and then yields or sleeps 50 us, so that lanes and warps drift apart more than the
// OS scheduler alone makes them. scripts/test.sh (CI) sets it: with it, the intra-warp stage
// release race fixed on 2026-12-05 spoiled 125-1500 outputs of tgemm_host per run, not 40-60.
inline void simt_jitter() {
  static const bool on = std::getenv("SIMT_JITTER") != nullptr && *std::getenv("SIMT_JITTER") != '\0';
  if (!on) return;
  thread_local std::minstd_rand rng((unsigned)std::hash<std::thread::id>{}(std::this_thread::get_id()));
  const unsigned r = rng() % 16;
  if (r == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  else if (r < 4) std::this_thread::yield();
}

#ifndef SIMT_TIMEOUT_S
#define SIMT_TIMEOUT_S 30
#endif
// A barrier over n threads that a thread can leave (arrive_and_drop, when it returns from the
// kernel) and that aborts with a message when it waits too long (some thread never came).
class SimtBarrier {
 public:
  SimtBarrier(int n, const char* what) : n_(n), what_(what) {}
  // Returns how many threads the barrier held when it opened (fewer than it started with when
  // some returned from the kernel).
  int arrive_and_wait() {
    const int opened = wait_open();
    simt_jitter();
    return opened;
  }
  void arrive_and_drop() {
    std::lock_guard<std::mutex> lk(m_);
    if (--n_ > 0 && count_ >= n_) release();
  }

 private:
  int wait_open() {
    std::unique_lock<std::mutex> lk(m_);
    const mx_u64 gen = gen_;
    if (++count_ >= n_) {
      release();
      return opened_;
    }
    if (!cv_.wait_for(lk, std::chrono::seconds(SIMT_TIMEOUT_S), [&] { return gen_ != gen; })) {
      fprintf(stderr, "simt.hpp: a %s waited %d s for %d of its %d threads (divergent or skipped?)\n", what_, SIMT_TIMEOUT_S,
              n_ - count_, n_);
      std::abort();
    }
    return opened_;
  }
  void release() {
    opened_ = n_;
    count_ = 0;
    ++gen_;
    cv_.notify_all();
  }
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0, opened_ = 0;
  mx_u64 gen_ = 0;
  const char* what_;
};

// One mbarrier (simt_sm90.hpp): arrivals still pending in this phase, transaction bytes
// still expected, the phase's parity.
struct SimtMbar { int count = 0, pending = 0; mx_i64 tx = 0; mx_u32 phase = 0; };
// What one thread hands its warpgroup's wgmma (simt_sm90.hpp).
struct SimtWgmmaSlot { float* d; mx_u64 da, db; int n, ta, tb, acc; };

// The running CTA: its barrier, one barrier per warp, and the warps' exchange slots; for
// simt_sm90.hpp its dynamic shared memory, warpgroup barriers, named barriers and mbarriers.
struct SimtCta {
  SimtCta(int threads, size_t dyn_smem)
      : cta(threads, "__syncthreads"), xch(threads), wslots(threads), smem_bytes(dyn_smem) {
    for (int w = 0; w < (threads + 31) / 32; ++w) warps.emplace_back(std::make_unique<SimtBarrier>(32, "warp collective"));
    for (int g = 0; g < (threads + 127) / 128; ++g)
      wgs.emplace_back(std::make_unique<SimtBarrier>(128, "warpgroup collective (wgmma)"));
    // poisoned, as shared memory holds whatever the last kernel left
    smem = static_cast<mx_u8*>(std::aligned_alloc(1024, (dyn_smem + 1023) / 1024 * 1024 + 1024));
    std::memset(smem, 0xA5, dyn_smem);
  }
  ~SimtCta() { std::free(smem); }
  SimtBarrier cta;
  std::vector<std::unique_ptr<SimtBarrier>> warps, wgs;
  std::vector<mx_u64> xch;
  std::vector<SimtWgmmaSlot> wslots;
  mx_u8* smem;
  size_t smem_bytes;
  std::mutex sync_m;                 // guards mbars and named; sync_cv: an mbarrier phase completed
  std::condition_variable sync_cv;
  std::unordered_map<const void*, SimtMbar> mbars;
  std::map<int, std::unique_ptr<SimtBarrier>> named;
};
inline SimtCta* simt_cta = nullptr;
// The running CTA's dynamic shared memory (MX_DYN_SMEM in a kernel).
inline mx_u8* simt_dyn_smem() { return simt_cta->smem; }

// A full-mask warp collective: every lane of the warp must be there (in CUDA one with exited
// lanes is undefined).
inline void simt_warp_meet(int w) {
  const int n = simt_cta->warps[w]->arrive_and_wait();
  if (n != 32) {
    fprintf(stderr, "simt.hpp: a full-mask warp collective in warp %d reached by %d lanes (the others returned)\n", w, n);
    std::abort();
  }
}

inline void __syncthreads() { simt_cta->cta.arrive_and_wait(); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void simt_full(mx_u32 mask) {
  if (mask != 0xffffffffu) throw std::logic_error("simt.hpp: only full-warp masks are emulated");
}
// Every lane publishes `v`, then reads lane `src`'s.
template <class T> inline T simt_exchange(T v, int src) {
  static_assert(sizeof(T) <= 8, "8-byte exchange slots");
  const int t = simt_tid, w = t >> 5;
  mx_u64 bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  simt_cta->xch[t] = bits;
  simt_warp_meet(w);
  const mx_u64 got = simt_cta->xch[(w << 5) | (src & 31)];
  simt_warp_meet(w);
  T r;
  std::memcpy(&r, &got, sizeof(T));
  return r;
}
template <class T> inline T __shfl_sync(mx_u32 m, T v, int src) { simt_full(m); return simt_exchange(v, src); }
template <class T> inline T __shfl_xor_sync(mx_u32 m, T v, int x) {
  simt_full(m);
  return simt_exchange(v, (simt_tid & 31) ^ x);
}
template <class T> inline T __shfl_up_sync(mx_u32 m, T v, int d) {
  simt_full(m);
  const int lane = simt_tid & 31;
  return simt_exchange(v, lane >= d ? lane - d : lane);
}
template <class T> inline T __shfl_down_sync(mx_u32 m, T v, int d) {
  simt_full(m);
  const int lane = simt_tid & 31;
  return simt_exchange(v, lane + d < 32 ? lane + d : lane);
}
// Combines the warp's 32 values with `f` (each lane reads all 32).
template <class T, class F> inline T simt_warp_fold(T v, T init, F f) {
  const int t = simt_tid, w = t >> 5;
  mx_u64 bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  simt_cta->xch[t] = bits;
  simt_warp_meet(w);
  T acc = init;
  for (int l = 0; l < 32; ++l) {
    T x;
    std::memcpy(&x, &simt_cta->xch[(w << 5) | l], sizeof(T));
    acc = f(acc, x, l);
  }
  simt_warp_meet(w);
  return acc;
}
inline mx_u32 __ballot_sync(mx_u32 m, int pred) {
  simt_full(m);
  return simt_warp_fold<mx_u32>(pred ? 1u : 0u, 0u, [](mx_u32 a, mx_u32 x, int l) { return a | (x << l); });
}
inline int __any_sync(mx_u32 m, int pred) { return __ballot_sync(m, pred) != 0; }
inline int __all_sync(mx_u32 m, int pred) { return __ballot_sync(m, pred) == 0xffffffffu; }
inline int __reduce_add_sync(mx_u32 m, int v) {
  simt_full(m);
  return simt_warp_fold<int>(v, 0, [](int a, int x, int) { return a + x; });
}
inline mx_u32 __reduce_or_sync(mx_u32 m, mx_u32 v) {
  simt_full(m);
  return simt_warp_fold<mx_u32>(v, 0u, [](mx_u32 a, mx_u32 x, int) { return a | x; });
}
inline void __syncwarp(mx_u32 m = 0xffffffffu) {
  simt_full(m);
  simt_warp_meet(simt_tid >> 5);
}

// Runs `body` as a kernel: grid (gx, gy, gz) of CTAs of `block` threads (x fastest; a multiple
// of 32 in all) with `dyn_smem` bytes of dynamic shared memory each.
template <class F> void simt_launch(simt_dim3 grid, simt_dim3 block, F body, size_t dyn_smem = 0) {
  const int threads = (int)(block.x * block.y * block.z);
  if (threads <= 0 || threads % 32 != 0) throw std::logic_error("simt.hpp: whole warps only");
  gridDim = grid;
  blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        SimtCta cta(threads, dyn_smem);
        simt_cta = &cta;
        std::vector<std::thread> ts;
        ts.reserve(threads);
        for (int t = 0; t < threads; ++t)
          ts.emplace_back([&, t] {
            threadIdx = simt_dim3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
            simt_tid = t;
            blockIdx = simt_dim3{x, y, z};
            body();
            cta.cta.arrive_and_drop();   // an exited thread no longer holds back the others
            cta.warps[t >> 5]->arrive_and_drop();
            cta.wgs[t >> 7]->arrive_and_drop();
          });
        for (auto& th : ts) th.join();
        simt_cta = nullptr;
      }
}

// One-dimensional blocks of `threads` threads.
template <class F> void simt_launch(simt_dim3 grid, int threads, F body, size_t dyn_smem = 0) {
  simt_launch(grid, simt_dim3{(unsigned)threads, 1, 1}, body, dyn_smem);
}

// The kernels' base header last, over the shims above: MX_DEV is `inline` here, the PTX
// wrappers are declared only (MX_HOST_SIMT), and mx_warp.cuh's helpers come along.
#define MX_HOST_SIMT
#include "mx_ptx.cuh"
