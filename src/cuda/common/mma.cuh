// src/cuda/common/mma.cuh — the tensor-core primitives of the chunked kernels, as inline PTX (sm_80+):
// ldmatrix, mma.sync m16n8k16 (16-bit inputs) and m16n8k8 (tf32) with float32 accumulation, cp.async,
// named barriers.
//
// Fragments of mma.m16n8k16 (lane l, g = l / 4, c = 2 (l % 4)):
//   A (16 x 16, row major), 4 registers of two 16-bit values: a0 (g, c..c+1), a1 (g+8, c..),
//     a2 (g, c+8..), a3 (g+8, c+8..)
//   B (16 x 8, k x n), 2 registers: b0 (k = c..c+1, n = g), b1 (k = c+8.., n = g)
//   C (16 x 8, float): c0, c1 (g, c..c+1), c2, c3 (g+8, c..c+1)
// Two C tiles side by side (columns 0-7, 8-15) are, packed to 16 bits, one A tile (a0 a1 from the
// first, a2 a3 from the second): a product's result feeds the next product from registers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/tma.cuh"  // smem_u32, bar_sync

namespace gdn::cuda::mma {

using cuda::smem_u32;  // (tma.cuh)

// Four 8 x 8 tiles of 16-bit elements; lane l gives the address of row l % 8 of tile l / 8, and gets
// elements (l / 4, 2 (l % 4) ..+1) of each tile (transposed: of each tile's transpose).
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// Two 8 x 8 tiles, transposed: lanes 0-15 give the addresses (row l % 8 of tile l / 8); the B
// fragment of one n-tile from a matrix stored [k][n] at rows k0..k0+15, columns n0..n0+7.
__device__ __forceinline__ void ldsm2_t(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(p)));
}
template <typename T>
__device__ __forceinline__ const T* b_single(const T* base, int ld, int k0, int n0, int lane) {
  return base + (k0 + ((lane >> 3) & 1) * 8 + (lane & 7)) * ld + n0;
}

// Row-major tile addressing for ldsm4 at element (r0, c0) of a matrix with row stride ld:
//   a_tile: the A fragment of the 16 x 16 tile (non-transposed load);
//   bt_pair: B fragments of two n-tiles from a matrix stored [n][k] (rows n0..n0+15, k0..k0+15):
//     r[0], r[1] for n-tile n0, r[2], r[3] for n0 + 8 (non-transposed load);
//   b_pair: B fragments of two n-tiles from a matrix stored [k][n] (transposed load), same order;
//   at_tile: the A fragment of the 16 x 16 tile of the transpose of a matrix stored [k][m]
//     (rows k0.., columns m0..; transposed load).
template <typename T>
__device__ __forceinline__ const T* a_tile(const T* base, int ld, int r0, int c0, int lane) {
  const int m = lane >> 3;
  return base + (r0 + (m & 1) * 8 + (lane & 7)) * ld + c0 + (m >> 1) * 8;
}
template <typename T>
__device__ __forceinline__ const T* bt_pair(const T* base, int ld, int n0, int k0, int lane) {
  const int m = lane >> 3;
  return base + (n0 + (m >> 1) * 8 + (lane & 7)) * ld + k0 + (m & 1) * 8;
}
template <typename T>
__device__ __forceinline__ const T* b_pair(const T* base, int ld, int k0, int n0, int lane) {
  const int m = lane >> 3;
  return base + (k0 + (m & 1) * 8 + (lane & 7)) * ld + n0 + (m >> 1) * 8;
}
template <typename T>
__device__ __forceinline__ const T* at_tile(const T* base, int ld, int k0, int m0, int lane) {
  const int m = lane >> 3;
  return base + (k0 + (m >> 1) * 8 + (lane & 7)) * ld + m0 + (m & 1) * 8;
}

// D += A B on 16-bit inputs of type T (__nv_bfloat16 or __half).
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// D += A B, m16n8k8 on tf32 inputs (A: a0 (g, c/2), a1 (g+8, c/2), a2 (g, c/2+4), a3 (g+8, c/2+4);
// B: b0 (k = c/2, n = g), b1 (k = c/2+4, n = g); C as above), float32 accumulators.
// (Not volatile: no side effect, so the compiler interleaves independent products.)
__device__ __forceinline__ void mma1688_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// x as big + small, two tf32 values (round to nearest): products of such pairs summed as big big +
// big small + small big keep float32 accuracy on tf32 tensor cores.
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(x));
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(x - __uint_as_float(big)));
}

// Two floats as one register of two 16-bit values (lo in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&h);
  }
  return r;
}
// The A fragment of -X from that of X (16-bit sign bits).
__device__ __forceinline__ void negate(uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] ^= 0x80008000u;
}

// 16 bytes global -> shared, asynchronously; valid = false: zeros (no global read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Until at most N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Named barriers (ids 1-15; 0 is __syncthreads) of n threads, a multiple of 32: sync waits for all n
// (tma.cuh's), arrive counts this thread's warp without waiting. The chunk kernels' arrive hands
// shared-memory tiles written with ordinary stores to the threads the barrier releases, so it fences
// them first (tma.cuh's bar_arrive, for hand-offs of asynchronous copies, does not).
using cuda::bar_sync;
__device__ __forceinline__ void bar_arrive(int id, int n) {
  __threadfence_block();
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

}  // namespace gdn::cuda::mma
