// src/cuda/common/cuda_util.cuh — dtype conversion, index loads and error checks for the CUDA kernels.
// A compiler pitfall for every device file: nvcc 13.0.88 compiles a device generic lambda whose body
// has `if constexpr` on a constant taken from its `auto` parameter (decltype(tag)::value) wrongly — its
// other instances came out as no code. In device code,
// select code by constant through a function template instead.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "gdn/status.h"
#include "gdn/tensor.h"

namespace gdn::cuda {

#define GDN_CUDA_CHECK(expr)                                                                     \
  do {                                                                                           \
    cudaError_t gdn_err_ = (expr);                                                               \
    if (gdn_err_ != cudaSuccess)                                                                 \
      return ::gdn::Status::Error(std::string(#expr) + ": " + cudaGetErrorString(gdn_err_));     \
  } while (0)

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// The value a store to T followed by a load gives.
template <typename T>
__device__ __forceinline__ float round_to(float x) { return to_float(from_float<T>(x)); }

// An index tensor as the kernels see it: int32 or int64, element (i, j) at i * row_stride + j.
struct IndexRef {
  const void* ptr = nullptr;
  int64_t row_stride = 1;
  bool is64 = false;
  __device__ __forceinline__ int64_t operator()(int64_t i, int64_t j = 0) const {
    const int64_t off = i * row_stride + j;
    return is64 ? static_cast<const int64_t*>(ptr)[off] : static_cast<const int32_t*>(ptr)[off];
  }
  __host__ __device__ __forceinline__ bool present() const { return ptr != nullptr; }
};

inline IndexRef index_ref(const TensorView& v) {
  IndexRef r;
  if (!v.present()) return r;
  r.ptr = v.data;
  r.row_stride = v.stride[0];  // [n]: element i at i * stride; [n, cols]: row i at i * stride
  r.is64 = v.dtype == DType::kInt64;
  return r;
}

// A float scalar vector of any float dtype (dt_bias, A_log): element i at i * stride.
struct FloatRef {
  const void* ptr = nullptr;
  int64_t stride = 1;
  int dtype = 0;  // 0 float32, 1 bfloat16, 2 float16, 3 float64
  __device__ __forceinline__ float operator()(int64_t i) const {
    const int64_t off = i * stride;
    if (dtype == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(ptr)[off]);
    if (dtype == 2) return __half2float(static_cast<const __half*>(ptr)[off]);
    if (dtype == 3) return static_cast<float>(static_cast<const double*>(ptr)[off]);
    return static_cast<const float*>(ptr)[off];
  }
  // Its element size, and an element from its raw bits (low and high 32-bit words, as
  // load_param_word below loads them).
  __device__ __forceinline__ int bytes() const { return dtype == 3 ? 8 : dtype == 0 ? 4 : 2; }
  __device__ __forceinline__ float from_bits(uint2 r) const {
    if (dtype == 1) return __uint_as_float(r.x << 16);
    if (dtype == 2) return __half2float(__ushort_as_half(static_cast<unsigned short>(r.x)));
    if (dtype == 3) return static_cast<float>(__hiloint2double(static_cast<int>(r.y), static_cast<int>(r.x)));
    return __uint_as_float(r.x);
  }
};
// One predicated load of `bytes` (2 or 4; anything else: none, 0) without a branch, so that it
// stays in flight until the word is used (a branch on a dtype makes the compiler wait for a
// warp-uniform load right there: rec_tokens.cuh, gate words).
__device__ __forceinline__ uint32_t load_word(const void* addr, int bytes) {
  uint32_t r = 0u;
  asm volatile(
      "{\n\t.reg .pred p4, p2;\n\t"
      "setp.eq.s32 p4, %1, 4;\n\t"
      "setp.eq.s32 p2, %1, 2;\n\t"
      "@p4 ld.global.u32 %0, [%2];\n\t"
      "@p2 ld.global.u16 %0, [%2];\n\t}"
      : "+r"(r)
      : "r"(bytes), "l"(addr));
  return r;
}
// Word w (0: low, 1: high; the high word only for float64) of element i of f, as load_word takes it.
__device__ __forceinline__ uint32_t load_param_word(const FloatRef& f, int64_t i, int w) {
  const int fb = f.bytes();
  const bool use = w == 0 || fb == 8;
  return load_word(static_cast<const char*>(f.ptr) + i * f.stride * fb + w * 4, use ? (fb == 2 ? 2 : 4) : 0);
}

// FloatRef's dtype code of a float dtype.
inline int float_code(DType t) {
  return t == DType::kBFloat16 ? 1 : t == DType::kFloat16 ? 2 : t == DType::kFloat64 ? 3 : 0;
}
inline FloatRef float_ref(const TensorView& v) {
  FloatRef r;
  r.ptr = v.data;
  r.stride = v.stride[0];
  r.dtype = float_code(v.dtype);
  return r;
}

// ptr and every row (row_stride elements of es bytes) start on a 16-byte boundary.
inline bool aligned16(const void* ptr, int64_t row_stride, size_t es) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (row_stride * static_cast<int64_t>(es)) % 16 == 0;
}

__device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }
// silu with the fast exponential and division (a few ulp of float32): for values that are rounded
// to 16 bits and feed only tensor-core products (the chunk kernel's inputs).
__device__ __forceinline__ float silu_fast(float x) { return __fdividef(x, 1.f + __expf(-x)); }

// Programmatic dependent launch (sm_90+). Every kernel of this backend starts with pdl_start():
// griddepcontrol.wait blocks until the stream's previous kernel has completed and its writes are
// visible (a no-op when there is none or the launch did not ask for overlap), so every result is
// that of plain stream order; then launch_dependents lets the stream's next kernel be launched
// while this one runs: its blocks become resident as room frees and wait in their own pdl_start().
// What overlaps is launch latency and block start-up, never a memory access.
__device__ __forceinline__ void pdl_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether launches ask for programmatic overlap with the stream's previous kernel: on sm_90+.
inline bool pdl_enabled() {
  int dev = 0, major = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major >= 9;
}

// One kernel launch of this backend: grid, block, dynamic shared memory, stream, programmatic
// overlap where pdl_enabled(), and optionally a cluster shape.
struct Launch {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2] = {};
  // overlap = false: no programmatic overlap with the previous kernel for this launch.
  Launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool overlap = true) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    if (overlap && pdl_enabled()) {
      attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
      ++cfg.numAttrs;
    }
  }
  Launch& cluster(unsigned x, unsigned y) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs].val.clusterDim.x = x;
    attr[cfg.numAttrs].val.clusterDim.y = y;
    attr[cfg.numAttrs].val.clusterDim.z = 1;
    ++cfg.numAttrs;
    return *this;
  }
  template <typename... KArgs, typename... Args>
  Status operator()(void (*kernel)(KArgs...), Args&&... args) {
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    if (e != cudaSuccess) return Status::Error(std::string("kernel launch: ") + cudaGetErrorString(e));
    return Status::Ok();
  }
};

// What the backend asks of a device: compute capability, SM count and opt-in shared memory per
// block, queried once per device (every field 0 when the query fails).
struct DeviceProps {
  int major = 0, sms = 0;
  size_t smem_optin = 0;
};
inline DeviceProps device_props(int device) {
  constexpr int kMaxDev = 64;
  static DeviceProps cache[kMaxDev];  // sms == 0: not yet queried
  static std::mutex mu;               // callers on several threads: whole entries only
  if (device >= 0 && device < kMaxDev) {
    std::lock_guard<std::mutex> lock(mu);
    if (cache[device].sms > 0) return cache[device];
  }
  DeviceProps d;
  int smem = 0;
  if (cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return DeviceProps{};
  }
  d.smem_optin = static_cast<size_t>(smem);
  if (device >= 0 && device < kMaxDev) {
    std::lock_guard<std::mutex> lock(mu);
    cache[device] = d;
  }
  return d;
}
// The current device, its compute capability and SM count.
inline Status device_of(int* dev, int* major, int* sms) {
  GDN_CUDA_CHECK(cudaGetDevice(dev));
  const DeviceProps d = device_props(*dev);
  if (d.sms == 0) return Status::Error("cudaDeviceGetAttribute failed for device " + std::to_string(*dev));
  *major = d.major, *sms = d.sms;
  return Status::Ok();
}

}  // namespace gdn::cuda
