// The one dispatch point per op: validate on the host, then hand the call to the backend of the
// tensors' device. Nothing is read or written before validation succeeds.
#include <exception>
#include <new>
#include <string>

#include "cpu/backend.h"
#include "forced_path.h"
#include "gdn/ops.h"
#ifdef GDN_WITH_CUDA
#include "cuda/backend.h"
#endif

namespace gdn {
namespace {

[[maybe_unused]] Status no_cuda(const char* op) {
  return Status::Error(std::string(op) + ": tensors are on a CUDA device but this build of gdn-kernels has no CUDA backend "
                       "(configure with nvcc available and GDN_ENABLE_CUDA=ON)");
}

// `probe` is the tensor whose device decides the backend (validation checked that all agree).
// Backends take their scratch up front, before any write; no exception leaves the library.
template <typename Args, typename Cpu, typename Cuda>
Status run([[maybe_unused]] const char* op, const Args& args, const TensorView& probe, Status valid, Cpu cpu_fn, Cuda cuda_fn,
           void* stream) {
  GDN_RETURN_IF_ERROR(valid);
  try {
    if (probe.device == Device::kCPU) return cpu_fn(args);
#ifdef GDN_WITH_CUDA
    return cuda_fn(args, stream);
#else
    (void)cuda_fn;
    (void)stream;
    return no_cuda(op);
#endif
  } catch (const std::bad_alloc&) {
    return Status::Error(std::string(op) + ": out of host memory");
  } catch (const std::exception& e) {
    return Status::Error(std::string(op) + ": " + e.what());
  }
}

template <typename Args, typename Supports>
Status check([[maybe_unused]] const char* op, const TensorView& probe, Status valid, const Args& args, Supports supports_fn) {
  GDN_RETURN_IF_ERROR(valid);
  if (probe.device == Device::kCPU) return Status::Ok();
#ifdef GDN_WITH_CUDA
  return supports_fn(args);
#else
  (void)supports_fn;
  (void)args;
  return no_cuda(op);
#endif
}

#ifdef GDN_WITH_CUDA
#define GDN_CUDA_FN(name) [](const auto& a, void* s) { return cuda::name(a, s); }
#define GDN_CUDA_FORCED(name) [force](const auto& a, void* s) { return cuda::name(a, s, force); }
#define GDN_CUDA_SUPPORTS(name) [](const auto& a) { return cuda::name(a); }
#else
#define GDN_CUDA_FN(name) [](const auto&, void*) { return Status::Ok(); }
#define GDN_CUDA_FORCED(name) [](const auto&, void*) { return Status::Ok(); }
#define GDN_CUDA_SUPPORTS(name) [](const auto&) { return Status::Ok(); }
#endif

}  // namespace

Status causal_conv1d_fwd(const CausalConv1dFwdArgs& a, void* stream) {
  return run("causal_conv1d_fwd", a, a.x, validate(a), cpu::causal_conv1d_fwd, GDN_CUDA_FN(causal_conv1d_fwd), stream);
}
Status causal_conv1d_update(const CausalConv1dUpdateArgs& a, void* stream) {
  return run("causal_conv1d_update", a, a.x, validate(a), cpu::causal_conv1d_update,
             GDN_CUDA_FN(causal_conv1d_update), stream);
}
Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& a, void* stream) {
  return internal::gated_delta_rule_recurrent(a, stream, {});
}
Status gated_delta_rule_chunked(const GatedDeltaRuleArgs& a, void* stream) {
  return internal::gated_delta_rule_chunked(a, stream, {});
}
Status gdn_attention(const GdnAttentionArgs& a, void* stream) { return internal::gdn_attention(a, stream, {}); }

Status internal::gated_delta_rule_recurrent(const GatedDeltaRuleArgs& a, void* stream,
                                            [[maybe_unused]] cuda::plan::Override force) {
  return run("gated_delta_rule_recurrent", a, a.q, validate_recurrent(a), cpu::gated_delta_rule_recurrent,
             GDN_CUDA_FORCED(gated_delta_rule_recurrent), stream);
}
Status internal::gated_delta_rule_chunked(const GatedDeltaRuleArgs& a, void* stream,
                                          [[maybe_unused]] cuda::plan::Override force) {
  return run("gated_delta_rule_chunked", a, a.q, validate_chunked(a), cpu::gated_delta_rule_chunked,
             GDN_CUDA_FORCED(gated_delta_rule_chunked), stream);
}
Status internal::gdn_attention(const GdnAttentionArgs& a, void* stream, [[maybe_unused]] cuda::plan::Override force) {
  return run("gdn_attention", a, a.projected_states_qkvz, validate(a), cpu::gdn_attention,
             GDN_CUDA_FORCED(gdn_attention), stream);
}

Status can_implement(const CausalConv1dFwdArgs& a) {
  return check("causal_conv1d_fwd", a.x, validate(a), a, GDN_CUDA_SUPPORTS(supports));
}
Status can_implement(const CausalConv1dUpdateArgs& a) {
  return check("causal_conv1d_update", a.x, validate(a), a, GDN_CUDA_SUPPORTS(supports));
}
Status can_implement_recurrent(const GatedDeltaRuleArgs& a) {
  return check("gated_delta_rule_recurrent", a.q, validate_recurrent(a), a, GDN_CUDA_SUPPORTS(supports_recurrent));
}
Status can_implement_chunked(const GatedDeltaRuleArgs& a) {
  return check("gated_delta_rule_chunked", a.q, validate_chunked(a), a, GDN_CUDA_SUPPORTS(supports_chunked));
}
Status can_implement(const GdnAttentionArgs& a) {
  return check("gdn_attention", a.projected_states_qkvz, validate(a), a, GDN_CUDA_SUPPORTS(supports));
}

bool cuda_backend_available() {
#ifdef GDN_WITH_CUDA
  return cuda::available();
#else
  return false;
#endif
}

}  // namespace gdn
