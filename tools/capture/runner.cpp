// Runs an op on a chosen backend from host-resident arguments (see runner.h).
//
// Each argument struct lists its TensorView members once, in tensors_of(); the CUDA path walks
// that list: allocate the span of every present tensor, copy it up, run on the default stream,
// synchronize, copy every buffer back, free.
#include "capture/runner.h"

#include "forced_path.h"

#include <vector>

#ifdef GDN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace gdn::capture {
namespace {

std::vector<TensorView*> tensors_of(CausalConv1dFwdArgs& a) {
  return {&a.x, &a.weight, &a.bias, &a.conv_state, &a.query_start_loc, &a.state_indices,
          &a.has_initial_state, &a.y};
}

std::vector<TensorView*> tensors_of(CausalConv1dUpdateArgs& a) {
  return {&a.x, &a.weight, &a.bias, &a.conv_state, &a.query_start_loc, &a.state_indices,
          &a.num_accepted_tokens, &a.y};
}

std::vector<TensorView*> tensors_of(GatedDeltaRuleArgs& a) {
  return {&a.q, &a.k, &a.v, &a.a, &a.b, &a.A_log, &a.dt_bias, &a.ssm_state, &a.query_start_loc,
          &a.state_indices, &a.num_accepted_tokens, &a.has_initial_state, &a.o, &a.verify_log, &a.verify_log_out,
          &a.token_parents, &a.accepted_path};
}

std::vector<TensorView*> tensors_of(GdnAttentionArgs& a) {
  return {&a.core_attn_out, &a.z, &a.projected_states_qkvz, &a.projected_states_ba,
          &a.conv_state, &a.ssm_state, &a.conv_weights, &a.conv_bias, &a.A_log, &a.dt_bias,
          &a.has_initial_state, &a.non_spec_query_start_loc, &a.non_spec_token_indx,
          &a.non_spec_state_indices_tensor, &a.spec_query_start_loc, &a.spec_token_indx,
          &a.spec_state_indices_tensor, &a.num_accepted_tokens, &a.verify_log, &a.verify_log_out, &a.conv_log,
          &a.conv_log_out, &a.non_spec_num_accepted_tokens, &a.spec_accepted_path, &a.non_spec_accepted_path,
          &a.spec_token_parents};
}

// Bytes from the first element to one past the last one reachable through the strides.
Status span_bytes(const TensorView& t, size_t* out) {
  if (t.ndim < 0 || t.ndim > kMaxDims)
    return Status::Error("tensor with invalid ndim " + std::to_string(t.ndim));
  int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0 || t.stride[d] < 0)
      return Status::Error("tensor " + t.describe() + " has a negative shape or stride");
    if (t.shape[d] == 0) {
      *out = 0;
      return Status::Ok();
    }
    last += (t.shape[d] - 1) * t.stride[d];
  }
  *out = static_cast<size_t>(last + 1) * dtype_size(t.dtype);
  return Status::Ok();
}

Status check_host(const std::vector<TensorView*>& ts) {
  for (const TensorView* t : ts) {
    if (t->present() && t->device != Device::kCPU)
      return Status::Error("runner: host arguments expected, got a tensor " + t->describe());
  }
  return Status::Ok();
}

#ifdef GDN_WITH_CUDA
Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Error(std::string("runner: ") + what + ": " + cudaGetErrorString(e));
}

// One device buffer per distinct host pointer (aliased views share it).
struct DeviceBuffers {
  struct Buffer {
    void* host = nullptr;
    size_t bytes = 0;
    void* device = nullptr;
  };
  std::vector<Buffer> buffers;

  ~DeviceBuffers() {
    for (Buffer& b : buffers)
      if (b.device) cudaFree(b.device);
  }

  Buffer* find(void* host) {
    for (Buffer& b : buffers)
      if (b.host == host) return &b;
    return nullptr;
  }

  // Reserve room for `bytes` at `host`.
  void need(void* host, size_t bytes) {
    Buffer* b = find(host);
    if (!b) {
      buffers.push_back({host, bytes, nullptr});
    } else if (bytes > b->bytes) {
      b->bytes = bytes;
    }
  }

  Status upload() {
    for (Buffer& b : buffers) {
      // At least a few bytes, so that present tensors never get a null pointer.
      GDN_RETURN_IF_ERROR(cuda_status(cudaMalloc(&b.device, b.bytes ? b.bytes : 16), "cudaMalloc"));
      if (b.bytes)
        GDN_RETURN_IF_ERROR(cuda_status(
            cudaMemcpy(b.device, b.host, b.bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device"));
    }
    return Status::Ok();
  }

  Status download() {
    for (Buffer& b : buffers) {
      if (b.bytes)
        GDN_RETURN_IF_ERROR(cuda_status(
            cudaMemcpy(b.host, b.device, b.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host"));
    }
    return Status::Ok();
  }
};

template <typename Args, typename Op>
Status run_cuda(const Args& host_args, Op op) {
  if (!backend_available(Backend(Backend::kCUDA)))
    return Status::Error("runner: CUDA backend not available (no device, or the library reports "
                         "none)");
  Args dev = host_args;
  std::vector<TensorView*> ts = tensors_of(dev);
  DeviceBuffers bufs;
  for (TensorView* t : ts) {
    if (!t->present()) continue;
    size_t bytes = 0;
    GDN_RETURN_IF_ERROR(span_bytes(*t, &bytes));
    bufs.need(t->data, bytes);
  }
  GDN_RETURN_IF_ERROR(bufs.upload());
  for (TensorView* t : ts) {
    if (!t->present()) continue;
    t->data = bufs.find(t->data)->device;
    t->device = Device::kCUDA;
    t->device_index = 0;
  }
  Status s = op(dev, nullptr);
  GDN_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the op"));
  GDN_RETURN_IF_ERROR(s);
  return bufs.download();
}
#endif

template <typename Args, typename Op>
Status run_generic(Backend b, const Args& host_args, Op op) {
  Args copy = host_args;
  GDN_RETURN_IF_ERROR(check_host(tensors_of(copy)));
  if (!b.cuda()) return op(host_args, nullptr);
#ifdef GDN_WITH_CUDA
  return run_cuda(host_args, op);
#else
  return Status::Error("runner: CUDA backend not built");
#endif
}

}  // namespace

std::string backend_name(Backend b) {
  if (!b.cuda()) return "cpu";
  if (b.path == cuda::plan::Path::kAuto) return "cuda";
  return std::string("cuda_") + cuda::plan::path_name(b.path);
}

Status parse_backend(const std::string& s, Backend* out) {
  if (s == "cpu") {
    *out = Backend::kCPU;
    return Status::Ok();
  }
  if (s == "cuda") {
    *out = Backend::kCUDA;
    return Status::Ok();
  }
  cuda::plan::Path p;
  if (s.rfind("cuda_", 0) == 0 && cuda::plan::parse_path(s.c_str() + 5, &p)) {
    *out = Backend(Backend::kCUDA, p);
    return Status::Ok();
  }
  return Status::Error("backend must be cpu, cuda or cuda_<kernel path>; got '" + s + "'");
}

std::vector<Backend> test_backends(Ops ops) {
  using cuda::plan::Path;
  std::vector<Backend> v = {Backend::kCPU, Backend::kCUDA};
  for (int i = 1; i < static_cast<int>(Path::kCount); ++i) {
    const Path p = static_cast<Path>(i);
    const bool step = cuda::plan::is_step_path(p), chunk = cuda::plan::is_chunk_path(p);
    const bool deferred = cuda::plan::is_deferred_path(p), recurrence = !step && !chunk && !deferred;
    if (deferred ? ops == Ops::kDeferred
                 : ops == Ops::kAll || (ops == Ops::kRecurrent && recurrence) || (ops == Ops::kChunked && !step) ||
                       (ops == Ops::kAttention && step))
      v.push_back(Backend(Backend::kCUDA, p));
  }
  return v;
}

bool backend_available(Backend b) {
  if (!b.cuda()) return true;
#ifdef GDN_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return cuda_backend_available();
#else
  return false;
#endif
}

Status run_on(Backend b, const CausalConv1dFwdArgs& host_args) {
  return run_generic(b, host_args, [](const CausalConv1dFwdArgs& a, void* stream) {
    return causal_conv1d_fwd(a, stream);
  });
}

Status run_on(Backend b, const CausalConv1dUpdateArgs& host_args) {
  return run_generic(b, host_args, [](const CausalConv1dUpdateArgs& a, void* stream) {
    return causal_conv1d_update(a, stream);
  });
}

Status run_recurrent_on(Backend b, const GatedDeltaRuleArgs& host_args) {
  return run_generic(b, host_args, [b](const GatedDeltaRuleArgs& a, void* stream) {
    return internal::gated_delta_rule_recurrent(a, stream, {b.path});
  });
}

Status run_chunked_on(Backend b, const GatedDeltaRuleArgs& host_args) {
  return run_generic(b, host_args, [b](const GatedDeltaRuleArgs& a, void* stream) {
    return internal::gated_delta_rule_chunked(a, stream, {b.path});
  });
}

Status run_on(Backend b, const GdnAttentionArgs& host_args) {
  return run_generic(b, host_args, [b](const GdnAttentionArgs& a, void* stream) {
    return internal::gdn_attention(a, stream, {b.path});
  });
}

}  // namespace gdn::capture
