// Host helpers of the wgmma tests (test_cuda_wgmma.cu, test_cuda_wgmma_rs.cu): 16-bit values as bits,
// a device buffer, and the device check (wgmma runs on compute capability 9.0 only).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

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

}  // namespace gdn::wgmma_test
