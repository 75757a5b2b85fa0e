// bindings/torch/tensor_view.h — at::Tensor -> gdn::TensorView, and gdn::Status -> exception.
//
// The only place (with ops.cpp) that sees framework types. A view keeps the tensor's pointer,
// dtype, device and element strides; an undefined tensor or an empty optional becomes an absent
// view. Nothing is copied: the core validates shapes, dtypes, devices and strides itself and its
// message (which names the argument) is raised as RuntimeError via TORCH_CHECK.
#pragma once
#include <ATen/ATen.h>
#include <c10/util/Optional.h>

#include <vector>

#include "gdn/ops.h"

namespace gdn::torch_binding {

// `op` and `name` only label the error for tensors the core cannot describe at all
// (an unsupported dtype or device, more than kMaxDims dimensions).
TensorView to_view(const at::Tensor& t, const char* op, const char* name);
TensorView to_view(const c10::optional<at::Tensor>& t, const char* op, const char* name);

// The tensors an op writes in place (the schema's (a!) arguments), as views. Each is refused when it
// is a leaf that requires grad while grad mode is on, as torch refuses its own in-place ops; after a
// successful call (done) their version counters are bumped, as torch's in-place ops bump theirs, so
// that autograd notices when a tensor it saved for backward was overwritten (inference tensors have
// no counter).
class Written {
 public:
  explicit Written(const char* op) : op_(op) {}
  TensorView view(const at::Tensor& t, const char* name);
  TensorView view(const c10::optional<at::Tensor>& t, const char* name);
  // check(status), then the bumps.
  void done(const Status& status);

 private:
  const char* op_;
  std::vector<at::Tensor> tensors_;
};

// Raises the core's message as a c10::Error (RuntimeError in Python).
void check(const Status& status);
// The same for messages without the op's name (the enum parsers): "<op>: <message>".
void check(const Status& status, const char* op);

// Right before an op on tensors on `device`: the CPU backend's worker-thread limit set from
// torch.get_num_threads() (gdn::set_cpu_threads), and the stream to launch on returned: the
// caller's current CUDA stream, or nullptr (CPU, or a build without CUDA support in torch).
void* prepare_call(const at::Device& device);

}  // namespace gdn::torch_binding
