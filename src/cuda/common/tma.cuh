// src/cuda/common/tma.cuh — the tensor memory accelerator (TMA, sm_90) as inline PTX: a tiled copy of
// a box of a 3D tensor into shared memory, completed on an mbarrier; the mbarrier operations it needs;
// and the host side's tensor map (cuTensorMapEncodeTiled, reached through the runtime's driver entry
// point, so the library links no driver library).
//
// A box lands in shared memory dense, dimension 0 innermost, elements past a dimension's extent
// zero-filled. The chunk kernel loads 64 rows of one head's 128 columns as a box of 136 columns
// (kLdK): the 8 columns past the head are the zero padding of its conflict-free row stride, so its
// ldmatrix addressing is the same whether the tile came through cp.async or TMA.
//
// In passes below sm_90 the device wrappers compile to __trap(): a kernel using them still builds for
// sm_80, and its host side must use them only on a 9.x device (tensor_map_3d's caller checks).
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace gdn::cuda::tma {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDN_TMA_ENABLED 1
#else
#define GDN_TMA_ENABLED 0
#endif

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One arrival expected per phase (the thread that issues the copies).
__device__ __forceinline__ void bar_init(uint64_t* bar) {
#if GDN_TMA_ENABLED
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

// The arrival of this phase, announcing `bytes` of copies that complete it.
__device__ __forceinline__ void bar_expect(uint64_t* bar, uint32_t bytes) {
#if GDN_TMA_ENABLED
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#else
  __trap();
#endif
}

// Until the phase of the given parity (0 for the first, then alternating) is complete.
__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
#if GDN_TMA_ENABLED
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
#else
  __trap();
#endif
}

// Orders this thread's earlier shared-memory accesses (ordinary loads and stores) before later
// accesses of the async proxy (TMA writes into the same bytes).
__device__ __forceinline__ void fence_proxy_async() {
#if GDN_TMA_ENABLED
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// The box at (c0, c1, c2) of the tensor map into dst (16-byte aligned), completing on bar.
__device__ __forceinline__ void load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
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

// A 16-bit tensor [d2][d1][d0] (d0 contiguous; s1, s2 the strides in elements of dimensions 1 and 2)
// read in boxes of (b0, 1, b2) elements. False where the driver refuses it (alignment: base and
// strides 16-byte multiples).
bool tensor_map_3d(CUtensorMap* map, const void* base, bool bf16, int64_t d0, int64_t d1, int64_t d2, int64_t s1,
                   int64_t s2, int b0, int b2);

}  // namespace gdn::cuda::tma
