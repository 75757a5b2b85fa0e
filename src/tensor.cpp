// Tensor views, dtype names and the string forms of the op enums.
#include <algorithm>
#include <cstdint>
#include <sstream>

#include "gdn/ops.h"
#include "gdn/tensor.h"

namespace gdn {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kBool: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
  }
  return "unknown";
}

int64_t TensorView::numel() const {
  if (ndim < 0) return 0;
  int64_t n = 1;
  for (int d = 0; d < ndim && d < kMaxDims; ++d) {
    if (shape[d] <= 0) return 0;
    if (__builtin_mul_overflow(n, shape[d], &n)) return INT64_MAX;
  }
  return n;
}

bool TensorView::inner_contiguous() const {
  int64_t expect = 1;
  for (int d = ndim - 1; d >= 1; --d) {
    if (shape[d] != 1 && stride[d] != expect) return false;
    expect *= shape[d];
  }
  return ndim < 1 || shape[0] <= 1 || stride[0] >= expect;
}

bool TensorView::contiguous() const {
  int64_t expect = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

std::string TensorView::describe() const {
  if (!present()) return "absent";
  std::ostringstream s;
  s << dtype_name(dtype);
  if (ndim > kMaxDims) {
    s << " view with ndim " << ndim;
  } else {
    s << " [";
    for (int d = 0; d < ndim; ++d) s << (d ? ", " : "") << shape[d];
    s << "]";
  }
  if (device == Device::kCUDA) s << " on cuda:" << device_index;
  return s.str();
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device,
                     int device_index) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.device_index = device_index;
  v.ndim = static_cast<int>(shape.size());  // more than kMaxDims: kept, for validation to refuse
  int d = 0;
  for (int64_t s : shape)
    if (d < kMaxDims) v.shape[d++] = s;
  int64_t st = 1;
  for (d = std::min(v.ndim, kMaxDims) - 1; d >= 0; --d) {
    v.stride[d] = st;
    st *= v.shape[d];
  }
  return v;
}

Status parse_activation(const std::string& s, Activation* out) {
  if (s == "silu" || s == "swish") { *out = Activation::kSilu; return Status::Ok(); }
  if (s.empty() || s == "none" || s == "identity") { *out = Activation::kNone; return Status::Ok(); }
  return Status::Error("activation must be one of silu, swish, identity, none; got '" + s + "'");
}

Status parse_spec_conv_layout(const std::string& s, SpecConvLayout* out) {
  if (s == "rolling") { *out = SpecConvLayout::kRolling; return Status::Ok(); }
  if (s == "per_token") { *out = SpecConvLayout::kPerToken; return Status::Ok(); }
  return Status::Error("spec_layout must be one of rolling, per_token; got '" + s + "'");
}

Status parse_state_layout(const std::string& s, StateLayout* out) {
  if (s == "vk") { *out = StateLayout::kVK; return Status::Ok(); }
  if (s == "kv") { *out = StateLayout::kKV; return Status::Ok(); }
  return Status::Error("state_layout must be one of vk, kv; got '" + s + "'");
}

const char* to_string(Activation a) { return a == Activation::kSilu ? "silu" : "identity"; }
const char* to_string(SpecConvLayout l) { return l == SpecConvLayout::kRolling ? "rolling" : "per_token"; }
const char* to_string(StateLayout l) { return l == StateLayout::kVK ? "vk" : "kv"; }

}  // namespace gdn
