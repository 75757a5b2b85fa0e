// at::Tensor -> gdn::TensorView conversion, status -> exception, and the caller's stream.
#include "tensor_view.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#ifdef GDN_TORCH_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace gdn::torch_binding {
namespace {

bool to_dtype(at::ScalarType s, DType* out) {
  switch (s) {
    case at::kFloat: *out = DType::kFloat32; return true;
    case at::kBFloat16: *out = DType::kBFloat16; return true;
    case at::kHalf: *out = DType::kFloat16; return true;
    case at::kDouble: *out = DType::kFloat64; return true;
    case at::kInt: *out = DType::kInt32; return true;
    case at::kLong: *out = DType::kInt64; return true;
    case at::kBool: *out = DType::kBool; return true;
    default: return false;
  }
}

// torch's Python spelling of a dtype the core does not take ("int16", not c10's "Short").
const char* torch_dtype_name(at::ScalarType s) {
  switch (s) {
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kComplexHalf: return "complex32";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(s);
  }
}

}  // namespace

TensorView to_view(const at::Tensor& t, const char* op, const char* name) {
  TensorView v;
  if (!t.defined()) return v;  // absent
  TORCH_CHECK(to_dtype(t.scalar_type(), &v.dtype), op, ": ", name,
              " must have a dtype gdn-kernels takes (values: float32, bfloat16, float16 or float64; indices: int32 "
              "or int64; flags: bool), got ", torch_dtype_name(t.scalar_type()), " ", t.sizes());
  if (t.device().is_cpu()) {
    v.device = Device::kCPU;
    v.device_index = 0;
  } else if (t.device().is_cuda()) {
    v.device = Device::kCUDA;
    v.device_index = t.device().index();
  } else {
    TORCH_CHECK(false, op, ": ", name, " must be on the CPU or a CUDA device, got ", t.device());
  }
  TORCH_CHECK(t.dim() <= kMaxDims, op, ": ", name, " must have at most ", kMaxDims, " dimensions, got ",
              t.dim(), " ", t.sizes());
  v.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = t.size(d);
    v.stride[d] = t.stride(d);
  }
  v.data = t.data_ptr();
  return v;
}

TensorView to_view(const c10::optional<at::Tensor>& t, const char* op, const char* name) {
  if (!t.has_value()) return TensorView();
  return to_view(*t, op, name);
}

TensorView Written::view(const at::Tensor& t, const char* name) {
  if (!t.defined()) return TensorView();
  TORCH_CHECK(!(c10::GradMode::is_enabled() && t.requires_grad() && t.is_leaf()), op_, ": ", name,
              " is a leaf tensor that requires grad, which the op would write in place (torch refuses that for "
              "its own in-place ops; pass a tensor without requires_grad, or call under torch.no_grad())");
  tensors_.push_back(t);
  return to_view(t, op_, name);
}

TensorView Written::view(const c10::optional<at::Tensor>& t, const char* name) {
  return t.has_value() ? view(*t, name) : TensorView();
}

void Written::done(const Status& status) {
  check(status);
  for (const at::Tensor& t : tensors_)
    if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

void check(const Status& status) { TORCH_CHECK(status.ok(), status.message()); }

void check(const Status& status, const char* op) { TORCH_CHECK(status.ok(), op, ": ", status.message()); }

void* prepare_call(const at::Device& device) {
  if (device.is_cpu()) gdn::set_cpu_threads(at::get_num_threads());
#ifdef GDN_TORCH_WITH_CUDA
  if (device.is_cuda()) return static_cast<void*>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
#else
  (void)device;  // torch without CUDA: no CUDA tensor can reach this point
#endif
  return nullptr;
}

}  // namespace gdn::torch_binding
