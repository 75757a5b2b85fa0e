// An SM copy kernel: the bandwidth ceiling `gdn bench` reports against (docs/performance.md: a copy
// engine node in a graph runs slower than an SM kernel, so the ceiling is measured this way).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace {
// Four independent 16-byte loads per thread before the stores (n a multiple of 4 * threads).
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = i + k * stride < n ? __ldcs(src + i + k * stride) : uint4{};
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * stride < n) __stcs(dst + i + k * stride, v[k]);
  }
}
__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t seed, uint32_t kind) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    if (kind == 0) {  // float32 in [-0.5, 0.5)
      float f = (h >> 8) * (1.f / 16777216.f) - 0.5f;
      p[i] = __float_as_uint(f);
    } else {  // two bfloat16 in [-0.5, 0.5)
      float f0 = (h & 0xffff) * (1.f / 65536.f) - 0.5f, f1 = (h >> 16) * (1.f / 65536.f) - 0.5f;
      p[i] = (__float_as_uint(f0) >> 16) | (__float_as_uint(f1) & 0xffff0000u);
    }
  }
}
}  // namespace

namespace gdn::bench {
void sm_copy(const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  copy_kernel<<<132 * 8, 512, 0, stream>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), bytes / 16);
}
// Fills bytes (a multiple of 4) with hashed random values: kind 0 float32, 1 bfloat16.
void fill_random(void* p, size_t bytes, uint32_t seed, int kind, cudaStream_t stream) {
  fill_kernel<<<132 * 4, 256, 0, stream>>>(static_cast<uint32_t*>(p), bytes / 4, seed, static_cast<uint32_t>(kind));
}
}  // namespace gdn::bench
