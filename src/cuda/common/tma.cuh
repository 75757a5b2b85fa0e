// src/cuda/common/tma.cuh — the sm_90 asynchronous-copy primitives as inline PTX (PTX ISA 8.0):
// mbarriers, bulk copies (cp.async.bulk) between global and shared memory, tiled copies of a box of a
// tensor (TMA, cp.async.bulk.tensor) into shared memory, the async-proxy fence, named barriers; and
// the host side's tensor map (cuTensorMapEncodeTiled, reached through the runtime's driver entry
// point, so the library links no driver library; tma.cu).
//
// A tensor box lands in shared memory dense, dimension 0 innermost, elements past a dimension's
// extent zero-filled. The chunk kernel loads 64 rows of one head's 128 columns as a box of 136
// columns (kLdK): the 8 columns past the head are the zero padding of its conflict-free row stride,
// so its ldmatrix addressing is the same whether the tile came through cp.async or TMA.
//
// In passes below sm_90 the sm_90-only wrappers compile to __trap(): a kernel using them still
// builds for sm_80, and its host side must use them only on a 9.x device (the pipelined kernels
// compile their bodies for sm_90 only; the chunk kernel takes tensor maps only on 9.x devices).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace gdn::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDN_TMA_ENABLED 1
#else
#define GDN_TMA_ENABLED 0
#endif

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Orders this thread's earlier mbarrier.init before later operations on the barriers (the chunk
// kernel's, after initialising them, before the block's barrier).
__device__ __forceinline__ void mbar_init_fence() {
#if GDN_TMA_ENABLED
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// The arrival of this phase, announcing `bytes` of copies that complete it.
__device__ __forceinline__ void mbar_arrive_tx(uint64_t* bar, uint32_t bytes) {
#if GDN_TMA_ENABLED
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}
// Waits for the completion of the barrier's phase of the given parity (0 for the first, then
// alternating).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if GDN_TMA_ENABLED
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "retry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra retry;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#else
  __trap();
#endif
}
// Named barrier `id` of `threads` threads (a multiple of 32): wait for all, or only arrive.
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
// bytes (a multiple of 16, both addresses 16-byte aligned) from global to this block's shared
// memory; completion counted on bar's transaction bytes.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if GDN_TMA_ENABLED
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void bulk_load_hint(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                               uint64_t pol) {
#if GDN_TMA_ENABLED
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol)
      : "memory");
#else
  __trap();
#endif
}
// The box at (c0, c1, c2) of a 3D tensor map (tensor_map_3d) into dst (16-byte aligned), completion
// counted on bar's transaction bytes.
__device__ __forceinline__ void tensor_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                               uint64_t* bar) {
#if GDN_TMA_ENABLED
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_u32(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}

// Orders this thread's earlier shared-memory accesses (ordinary loads and stores) before later
// accesses of the async proxy (bulk or tensor copies, wgmma operand reads, of the same bytes).
__device__ __forceinline__ void fence_proxy_async() {
#if GDN_TMA_ENABLED
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}
// Bulk store: bytes of this block's shared memory to global memory (both 16-byte aligned, a
// multiple of 16), one bulk group per call. Every thread that wrote the source calls
// fence_proxy_async() first (its generic-proxy writes become visible to the copy engine);
// bulk_store_wait_read() returns once the source may be overwritten, bulk_store_wait() once the
// stores are done.
__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
#if GDN_TMA_ENABLED
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_u32(src)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void bulk_store_wait_read() {
#if GDN_TMA_ENABLED
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void bulk_store_wait() {
#if GDN_TMA_ENABLED
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#else
  __trap();
#endif
}

// A 16-bit tensor [d2][d1][d0] (d0 contiguous; s1, s2 the strides in elements of dimensions 1 and 2)
// read in boxes of (b0, 1, b2) elements. False where the driver refuses it (alignment: base and
// strides 16-byte multiples).
bool tensor_map_3d(CUtensorMap* map, const void* base, bool bf16, int64_t d0, int64_t d1, int64_t d2, int64_t s1,
                   int64_t s2, int b0, int b2);

}  // namespace gdn::cuda
