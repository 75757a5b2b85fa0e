// Host helpers of the wgmma tests (test_cuda_wgmma.cu, test_cuda_wgmma_rs.cu): 16-bit values as bits,
// a device buffer, the device check (wgmma runs on compute capability 9.0 only), the launch of one
// test block, and the reference of a 64 x N product with its element-by-element check.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace gdn::wgmma_test {

template <typename T>
uint16_t to_bits(float x) {
  T h;
  if constexpr (std::is_same_v<T, __half>) {
    h = __float2half_rn(x);
  } else {
    h = __float2bfloat16_rn(x);
  }
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
template <typename T>
float from_bits(uint16_t u) {
  T h;
  std::memcpy(&h, &u, 2);
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(h);
  } else {
    return __bfloat162float(h);
  }
}

template <typename T>
struct DevBuf {
  T* p = nullptr;
  explicit DevBuf(size_t n) { EXPECT_EQ(cudaSuccess, cudaMalloc(&p, n * sizeof(T))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// Empty when a compute capability 9.0 device is present, else why the device cases skip.
inline std::string no_sm90a_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return "no CUDA device available";
  }
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
    return "device properties unavailable";
  if (prop.major != 9 || prop.minor != 0)
    return "wgmma (sm_90a code) runs on compute capability 9.0 only; this device is " + std::to_string(prop.major) +
           "." + std::to_string(prop.minor);
  return "";
}

template <typename T>
void upload(DevBuf<T>& dst, const std::vector<T>& src) {
  EXPECT_EQ(cudaSuccess, cudaMemcpy(dst.p, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// Launches kernel(args..., status) on one block of 128 threads with `smem` bytes of dynamic shared
// memory and expects status 0 (the test kernels: 1 built without sm_90a code, 2 shared base misaligned).
template <typename K, typename... Args>
void launch_one_block(K kernel, size_t smem, DevBuf<int>& status, Args... args) {
  EXPECT_EQ(cudaSuccess, cudaMemset(status.p, 0, sizeof(int)));
  EXPECT_EQ(cudaSuccess, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<1, 128, smem>>>(args..., status.p);
  EXPECT_EQ(cudaSuccess, cudaGetLastError());
  EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
  int st = -1;
  EXPECT_EQ(cudaSuccess, cudaMemcpy(&st, status.p, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(0, st) << "1: no sm_90a code in the kernel, 2: shared tile base not 1024-byte aligned";
}

constexpr int kRows = 64;  // M of every wgmma

// The reference of C + A B^T (c null: no C) for A [64][kdim] and B [n][kdim] (16-bit bits of T,
// row-major) in double, and per element the sum of |terms| (|C| included) the tolerance scales with.
template <typename T>
void product_ref(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const float* c, int n, int kdim,
                 std::vector<double>& ref, std::vector<double>& scale) {
  ref.assign(kRows * n, 0.0);
  scale.assign(kRows * n, 0.0);
  for (int m = 0; m < kRows; ++m)
    for (int j = 0; j < n; ++j) {
      double r = c ? c[m * n + j] : 0.0, sc = std::fabs(r);
      for (int k = 0; k < kdim; ++k) {
        const double p = double(from_bits<T>(a[m * kdim + k])) * from_bits<T>(b[j * kdim + k]);
        r += p;
        sc += std::fabs(p);
      }
      ref[m * n + j] = r;
      scale[m * n + j] = sc;
    }
}

// Checks D [64][n] against the reference: equal where `exact` (integer data), else |D - ref| <= 1e-5
// of the element's sum of |terms|; every element finite. Returns the largest error relative to that
// sum (infinite where an element is not finite).
inline double check_product(const std::vector<float>& d, const std::vector<double>& ref,
                            const std::vector<double>& scale, int n, bool exact) {
  double worst = 0;
  int failures = 0;
  for (int m = 0; m < kRows; ++m)
    for (int j = 0; j < n; ++j) {
      const double got = d[m * n + j], r = ref[m * n + j], sc = scale[m * n + j], err = std::fabs(got - r);
      const bool ok = std::isfinite(got) && (exact ? got == r : err <= 1e-5 * sc);
      worst = std::isfinite(got) ? std::max(worst, sc > 0 ? err / sc : err) : INFINITY;
      if (!ok && ++failures <= 8)
        ADD_FAILURE() << "D[" << m << "][" << j << "] = " << got << ", reference " << r << " (sum |terms| " << sc
                      << ")";
    }
  EXPECT_EQ(0, failures) << failures << " of " << kRows * n << " elements wrong ("
                         << (exact ? "integer data, exact" : "random data") << ")";
  return worst;
}

}  // namespace gdn::wgmma_test
