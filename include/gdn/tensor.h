// gdn/tensor.h — a non-owning view of a tensor: pointer, dtype, device, shape, element strides.
// The core never sees a framework tensor; bindings fill these views.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace gdn {

enum class DType { kFloat32, kBFloat16, kFloat16, kFloat64, kInt32, kInt64, kBool };
enum class Device { kCPU, kCUDA };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "bfloat16", ...

constexpr int kMaxDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device = Device::kCPU;
  int device_index = 0;
  int ndim = -1;  // -1 (any negative): absent (an optional argument that was not given); at most kMaxDims
  int64_t shape[kMaxDims] = {0, 0, 0, 0};
  int64_t stride[kMaxDims] = {0, 0, 0, 0};  // in elements

  bool present() const { return ndim >= 0; }
  int64_t size(int d) const { return shape[d]; }
  int64_t numel() const;  // 0 when absent or empty; INT64_MAX past int64 (validation refuses such views)
  // Dims 1..ndim-1 dense (row-major); dim 0 may have any stride >= the dense row size.
  bool inner_contiguous() const;
  bool contiguous() const;
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  std::string describe() const;  // e.g. "int64 [3, 4]", "absent" or "float32 view with ndim 7"
};

// A dense row-major view.
TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                     Device device = Device::kCPU, int device_index = 0);

}  // namespace gdn
