// mx_ptx.cuh — plain types (mx_types.cuh) and PTX wrappers (mbarrier, cp.async, fences,
// setmaxnreg, TMA, clusters).
// NVRTC-clean: no standard headers. Included first by every mxhost kernel file.
#pragma once

#include "mx_types.cuh"

#define MX_DEV __device__ __forceinline__
// A PTX wrapper's body. Host tests (tests/host/simt.hpp, MX_HOST_SIMT) compile the kernels
// without PTX: there each wrapper is declared and never defined, so a kernel that would run
// one fails to link instead of running without it.
#ifdef MX_HOST_SIMT
#define MX_PTX(...) ;
#else
#define MX_PTX(...) __VA_ARGS__
#endif

// The helpers without PTX (byte transposes, warp scan, the chained GEMM's gate test).
#include "mx_warp.cuh"

// A kernel's dynamic shared memory, as bytes named NAME (the host harness hands each CTA an
// arena instead: simt_sm90.hpp).
#ifdef MX_HOST_SIMT
#define MX_DYN_SMEM(NAME, ALIGN) mx_u8* const NAME = simt_dyn_smem()
#else
#define MX_DYN_SMEM(NAME, ALIGN) extern __shared__ __align__(ALIGN) mx_u8 NAME[]
#endif

MX_DEV mx_u32 smem_u32(const void* p) MX_PTX({
  return (mx_u32)__cvta_generic_to_shared(p);
})

// ---- mbarrier (CTA scope) ----
MX_DEV void mbar_init(mx_u64* bar, mx_u32 count) MX_PTX({
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(count) : "memory");
})
MX_DEV void mbar_arrive(mx_u64* bar) MX_PTX({
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(smem_u32(bar)) : "memory");
})
// A warp's release of a buffer its lanes have read: one arrival per warp, after every lane's
// reads. The CUDA model orders another lane's loads before lane 0's arrive only through a
// warp barrier (the lanes are separate threads); the host emulation (tests/host/simt_sm90.hpp),
// whose lanes run apart, lost a stage's scales to the next TMA fill without it.
// (A template only so that host builds without the mbarrier emulation do not see a use of the
// declared-only mbar_arrive.)
template <class Bar> MX_DEV void mbar_arrive_warp(Bar* bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}
// Blocks until the phase with the given parity has completed.
MX_DEV void mbar_wait(mx_u64* bar, mx_u32 parity) MX_PTX({
  asm volatile(
      "{\n.reg .pred p;\n"
      "MXW_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra MXW_%=;\n}\n" :: "r"(smem_u32(bar)), "r"(parity) : "memory");
})
// The same wait for a thread with nothing else to do (the TMA producer): with a
// suspend-time hint the hardware parks the thread until the phase completes instead of
// returning at once. A plain try_wait loop in the producer spun ~250 k times per SM per
// forward GEMM (ncu, run 9: 17 % of its scheduler's issue slots, taken from the two
// consumer warps that share that scheduler and gate both warpgroups' wgmmas).
MX_DEV void mbar_wait_parked(mx_u64* bar, mx_u32 parity) MX_PTX({
  asm volatile(
      "{\n.reg .pred p;\n"
      "MXP_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, %2;\n"
      "@!p bra MXP_%=;\n}\n" :: "r"(smem_u32(bar)), "r"(parity), "r"(0x989680u) : "memory");
})
// Whether the phase with the given parity has completed, without waiting (acquire when true).
MX_DEV bool mbar_test(mx_u64* bar, mx_u32 parity) MX_PTX({
  mx_u32 r;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(r) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return r != 0;
})
// The arrival happens when all prior cp.async of this thread have completed; the
// pending count is not incremented, so the barrier's init count includes it.
MX_DEV void cp_async_mbar_arrive_noinc(mx_u64* bar) MX_PTX({
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(smem_u32(bar)) : "memory");
})

// ---- cp.async 16 bytes, zero-filling the bytes past src_bytes (0..16) ----
MX_DEV void cp_async16(mx_u32 dst, const void* src, mx_u32 src_bytes) MX_PTX({
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
})
// Groups of this thread's cp.async copies: close the current group; wait until at most N
// of its groups are still in flight (then the older ones are visible to this thread).
MX_DEV void cp_async_commit() MX_PTX({ asm volatile("cp.async.commit_group;\n" ::: "memory"); })
template <int N> MX_DEV void cp_async_wait() MX_PTX({ asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); })

// 16 bytes global -> shared without registers (zeros when !valid; src must still be a
// readable address), and the wait for all of this thread's copies; after it the bytes are
// visible to this thread, to others after a barrier. The host harness copies at once.
#ifdef MX_HOST_SIMT
MX_DEV void mx_copy16_async(void* dst, const void* src, bool valid) {
  for (int i = 0; i < 16; ++i) static_cast<mx_u8*>(dst)[i] = valid ? static_cast<const mx_u8*>(src)[i] : 0;
}
MX_DEV void mx_copy_async_wait_all() {}
#else
MX_DEV void mx_copy16_async(void* dst, const void* src, bool valid) { cp_async16(smem_u32(dst), src, valid ? 16u : 0u); }
MX_DEV void mx_copy_async_wait_all() { cp_async_commit(); cp_async_wait<0>(); }
#endif

// ---- fences ----
MX_DEV void fence_proxy_async_smem() MX_PTX({
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
})
// Makes mbarrier inits visible to the async proxy (TMA) and the cluster.
MX_DEV void fence_mbarrier_init() MX_PTX({
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
})

// ---- register reallocation between warpgroups (sm_90a) ----
template <int N> MX_DEV void setmaxnreg_inc() MX_PTX({ asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N)); })
template <int N> MX_DEV void setmaxnreg_dec() MX_PTX({ asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N)); })

// ---- named barrier over a subset of warps ----
MX_DEV void named_bar_sync(int id, int threads) MX_PTX({
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
})

// ---- bf16 helpers (no cuda_bf16.h: NVRTC may lack it) ----
// (bf16_bits_to_f32: mx_warp.cuh)
// Round to nearest even (NaN stays NaN); packs lo in bits 0..15, hi in 16..31.
MX_DEV mx_u32 pack_bf16x2(float lo, float hi) MX_PTX({
  mx_u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
})

// ---- TMA (cp.async.bulk.tensor) and transaction-count mbarrier (sm_90) ----
// Opaque 128-byte CUtensorMap, built on the host with cuTensorMapEncodeTiled (README.md);
// passed inside a __grid_constant__ kernel parameter.
struct __align__(64) MxTmap { mx_u64 v[16]; };

MX_DEV void mbar_arrive_expect_tx(mx_u64* bar, mx_u32 bytes) MX_PTX({
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
})
// 2D tile load (c0 = innermost coordinate, elements); completes tx bytes on bar.
MX_DEV void tma_load_2d(mx_u32 dst, const MxTmap* map, int c0, int c1, mx_u64* bar) MX_PTX({
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      :: "r"(dst), "l"((mx_u64)map), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
})
// The same load multicast to the CTAs of this cluster in cta_mask: the box lands at the same
// shared-memory offset in each of them and completes tx bytes on the mbarrier at bar's offset
// in each (sm_90, a kernel launched with cluster dimensions).
MX_DEV void tma_load_2d_multicast(mx_u32 dst, const MxTmap* map, int c0, int c1, mx_u64* bar, mx_u16 cta_mask) MX_PTX({
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n"
      :: "r"(dst), "l"((mx_u64)map), "r"(c0), "r"(c1), "r"(smem_u32(bar)), "h"(cta_mask) : "memory");
})
// ---- clusters (sm_90) ----
MX_DEV mx_u32 cluster_ctarank() MX_PTX({ mx_u32 r; asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)); return r; })
// Arrive on the mbarrier at bar's offset in CTA `cta` of this cluster. Default semantics
// (release at CTA scope), as CUTLASS's ClusterBarrier::arrive: what it orders is this
// warpgroup's reads of a stage, whose wgmmas have completed (wait_group) before it.
MX_DEV void mbar_arrive_cluster(mx_u64* bar, mx_u32 cta) MX_PTX({
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
               "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n"
               :: "r"(smem_u32(bar)), "r"(cta) : "memory");
})
// Every thread of every CTA of the cluster (warp-aligned): all of them arrive, then wait.
MX_DEV void cluster_sync() MX_PTX({
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
})
MX_DEV void tma_prefetch_desc(const MxTmap* map) MX_PTX({
  asm volatile("prefetch.tensormap [%0];\n" :: "l"((mx_u64)map) : "memory");
})
// Adds bytes to the current phase's expected transaction count (no arrival).
MX_DEV void mbar_expect_tx(mx_u64* bar, mx_u32 bytes) MX_PTX({
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
})
// 1D bulk copy global -> shared (16-byte aligned addresses, size a multiple of 16).
MX_DEV void bulk_load(mx_u32 dst, const void* src, mx_u32 bytes, mx_u64* bar) MX_PTX({
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
})
// Shared-memory loads as volatile asm: ptxas keeps them where they are written (between
// the surrounding wgmma asm statements) instead of hoisting a whole group's scale loads
// to its top, which costs registers.
MX_DEV float lds_f32(mx_u32 a) MX_PTX({ float v; asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(a)); return v; })
MX_DEV float2 lds_f32x2(mx_u32 a) MX_PTX({
  float2 v; asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a)); return v;
})
MX_DEV float4 lds_f32x4(mx_u32 a) MX_PTX({
  float4 v; asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a)); return v;
})

// ---- TMA store (shared -> global, bulk async-group) ----
MX_DEV void st_shared_b32(mx_u32 a, mx_u32 v) MX_PTX({ asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(a), "r"(v) : "memory"); })
// Four copies of v in the 16 bytes at a.
MX_DEV void st_shared_v4_splat(mx_u32 a, mx_u32 v) MX_PTX({
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" :: "r"(a), "r"(v) : "memory");
})
// 2D tile store from shared memory; elements outside the tensor map's extent are not written.
MX_DEV void tma_store_2d(const MxTmap* map, mx_u32 src, int c0, int c1) MX_PTX({
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
               :: "l"((mx_u64)map), "r"(src), "r"(c0), "r"(c1) : "memory");
})
MX_DEV void bulk_commit() MX_PTX({ asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); })
// Wait until at most N committed bulk groups still read their shared-memory source.
template <int N> MX_DEV void bulk_wait_read() MX_PTX({ asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); })
// Wait until at most N committed bulk groups are incomplete (writes done).
template <int N> MX_DEV void bulk_wait() MX_PTX({ asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory"); })
