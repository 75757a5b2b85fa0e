// The TMA primitives (src/cuda/common/tma.cuh, tma.cu) on a 9.x device: boxes of a 3D tensor map
// into shared memory, completed on one mbarrier over two phases, then copied out and compared
// element for element (raw 16-bit copies: exact). Skips without a device of compute capability 9 or
// later.
//   CudaTma.HeadBoxPadsWithZeros: q-like [T = 200][H = 3][K = 128] bf16, box (136, 1, 64) at
//     (0, h, row0) for every head and row0 in {0, 64, 100, 150}: columns 128..135 and rows past T
//     are zero, the rest the head's elements (the chunk kernel's padded q / k tiles).
//   CudaTma.ValueBoxReadsOnOrZeros: v-like [T][HV = 2][V = 256], box (136, 1, 64) at (v0, hv, row0),
//     v0 in {0, 128}: at v0 = 0 the 8 columns past the block are the next columns' elements, at
//     v0 = 128 zeros (past V).
//   CudaTma.RefusesUnalignedStrides: a row stride that is not a multiple of 16 bytes gives no map.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/tma.cuh"

namespace {
namespace tma = gdn::cuda;  // (common/tma.cuh)

constexpr int kRows = 64, kBox = 136;

// Two boxes through one mbarrier (phase 0, then phase 1), each copied to out[i] ([64][136]).
__global__ void two_boxes(const __grid_constant__ CUtensorMap map, int c0a, int c1a, int c2a, int c0b, int c1b, int c2b,
                          uint16_t* out) {
  __shared__ __align__(128) uint16_t tile[kRows * kBox];
  __shared__ __align__(8) uint64_t bar;
  const int tid = threadIdx.x;
  for (int i = tid; i < kRows * kBox; i += blockDim.x) tile[i] = 0x7fc0;  // NaN in bf16: overwritten or wrong
  if (tid == 0) {
    tma::mbar_init(&bar, 1);
    tma::mbar_init_fence();
  }
  tma::fence_proxy_async();
  __syncthreads();
  for (int ph = 0; ph < 2; ++ph) {
    if (tid == 0) {
      tma::mbar_arrive_tx(&bar, kRows * kBox * 2);
      tma::tensor_load_3d(tile, &map, ph ? c0b : c0a, ph ? c1b : c1a, ph ? c2b : c2a, &bar);
    }
    tma::mbar_wait(&bar, static_cast<uint32_t>(ph));
    for (int i = tid; i < kRows * kBox; i += blockDim.x) out[ph * kRows * kBox + i] = tile[i];
    tma::fence_proxy_async();  // the reads above before the next copy's writes
    __syncthreads();
  }
}

bool tma_device() {
  int n = 0, dev = 0, major = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
}

std::vector<uint16_t> pattern(size_t n) {
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<uint16_t>(0x3c00 + (i * 7919) % 1021);  // finite, distinct nearby
  return h;
}

// Runs two_boxes for boxes a and b of a [d2][d1][d0] tensor and checks them against want(c0, c1, c2, row, col).
template <typename Want>
void check_boxes(int64_t d0, int64_t d1, int64_t d2, const int (&a)[3], const int (&b)[3], Want want) {
  const std::vector<uint16_t> h = pattern(static_cast<size_t>(d0 * d1 * d2));
  uint16_t *g = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMalloc(&g, h.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, 2 * kRows * kBox * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(g, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  CUtensorMap map;
  ASSERT_TRUE(tma::tensor_map_3d(&map, g, true, d0, d1, d2, d0, d0 * d1, kBox, kRows));
  two_boxes<<<1, 128>>>(map, a[0], a[1], a[2], b[0], b[1], b[2], out);
  std::vector<uint16_t> got(2 * kRows * kBox);
  ASSERT_EQ(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(g);
  cudaFree(out);
  int bad = 0;
  for (int ph = 0; ph < 2; ++ph) {
    const int* c = ph ? b : a;
    for (int r = 0; r < kRows; ++r)
      for (int col = 0; col < kBox; ++col) {
        const int64_t e = want(c[0], c[1], c[2], r, col);  // -1: zero
        const uint16_t w = e < 0 ? 0 : h[static_cast<size_t>(e)];
        bad += got[(ph * kRows + r) * kBox + col] != w;
      }
  }
  EXPECT_EQ(bad, 0) << "boxes (" << a[0] << ", " << a[1] << ", " << a[2] << ") and (" << b[0] << ", " << b[1] << ", "
                    << b[2] << ")";
}

TEST(CudaTma, HeadBoxPadsWithZeros) {
  if (!tma_device()) GTEST_SKIP() << "no CUDA device of compute capability 9 or later";
  constexpr int64_t T = 200, H = 3, K = 128;
  auto want = [&](int, int h, int row0, int r, int col) -> int64_t {
    const int64_t row = row0 + r;
    return col < K && row < T ? (row * H + h) * K + col : -1;
  };
  for (int h = 0; h < H; ++h) {
    check_boxes(K, H, T, {0, h, 0}, {0, h, 64}, want);
    check_boxes(K, H, T, {0, h, 100}, {0, h, 150}, want);
  }
}

TEST(CudaTma, ValueBoxReadsOnOrZeros) {
  if (!tma_device()) GTEST_SKIP() << "no CUDA device of compute capability 9 or later";
  constexpr int64_t T = 130, HV = 2, V = 256;
  auto want = [&](int v0, int hv, int row0, int r, int col) -> int64_t {
    const int64_t row = row0 + r, c = v0 + col;
    return c < V && row < T ? (row * HV + hv) * V + c : -1;
  };
  for (int hv = 0; hv < HV; ++hv) {
    check_boxes(V, HV, T, {0, hv, 0}, {128, hv, 0}, want);
    check_boxes(V, HV, T, {128, hv, 100}, {0, hv, 66}, want);
  }
}

TEST(CudaTma, RefusesUnalignedStrides) {
  if (!tma_device()) GTEST_SKIP() << "no CUDA device of compute capability 9 or later";
  void* g = nullptr;
  ASSERT_EQ(cudaMalloc(&g, 1 << 20), cudaSuccess);
  CUtensorMap map;
  EXPECT_TRUE(tma::tensor_map_3d(&map, g, true, 128, 3, 64, 128, 3 * 128, kBox, kRows));
  EXPECT_FALSE(tma::tensor_map_3d(&map, g, true, 128, 3, 64, 128, 3 * 128 + 1, kBox, kRows));  // 770-byte rows
  EXPECT_FALSE(tma::tensor_map_3d(&map, static_cast<char*>(g) + 2, true, 128, 3, 64, 128, 3 * 128, kBox, kRows));
  cudaFree(g);
}

}  // namespace
