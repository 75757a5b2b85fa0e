// tools/capture/runner.h — run an op on a chosen backend from host-resident arguments.
// For Backend::kCUDA every present tensor of the args is copied to the GPU (whole span, dim-0
// stride kept), the op runs on the default stream, and every tensor is copied back into the
// host buffers (so outputs and untouched bytes can be checked on the host).
// Test and tool code only; not part of the library.
#pragma once
#include <string>
#include <vector>

#include "cuda/plan/plan.h"

#include "gdn/ops.h"

namespace gdn::capture {

// A backend and, for CUDA, the kernel path forced on the ops that have several (kAuto: the
// planner's choice; a path of another op, or one that cannot run the call, leaves the planner's).
struct Backend {
  enum Kind : uint8_t { kCPU, kCUDA };
  Kind kind = kCPU;
  cuda::plan::Path path = cuda::plan::Path::kAuto;
  constexpr Backend(Kind k = kCPU, cuda::plan::Path p = cuda::plan::Path::kAuto) : kind(k), path(p) {}
  constexpr bool cuda() const { return kind == kCUDA; }
  friend constexpr bool operator==(Backend a, Backend b) { return a.kind == b.kind && a.path == b.path; }
  friend constexpr bool operator!=(Backend a, Backend b) { return !(a == b); }
};
// "cpu", "cuda" (the planner's choice), or "cuda_<path>" (plan::path_name)
std::string backend_name(Backend b);
Status parse_backend(const std::string& s, Backend* out);
bool backend_available(Backend b);  // kCPU always; kCUDA if built with CUDA and a GPU is present

// The backends a test of these ops runs on: the CPU, CUDA with the planner's choice, and CUDA with
// each kernel path the planner can choose for them forced.
// kChunked: the chunked op's paths (the recurrence's, which it falls back to, and the chunk kernel's);
// kDeferred: the recurrent op's deferred-commit mode (the deferred kernel's paths); kAll: every path
// but the deferred kernel's.
enum class Ops { kConv, kRecurrent, kChunked, kAttention, kDeferred, kAll };
std::vector<Backend> test_backends(Ops ops);

Status run_on(Backend b, const CausalConv1dFwdArgs& host_args);
Status run_on(Backend b, const CausalConv1dUpdateArgs& host_args);
Status run_recurrent_on(Backend b, const GatedDeltaRuleArgs& host_args);
Status run_chunked_on(Backend b, const GatedDeltaRuleArgs& host_args);
Status run_on(Backend b, const GdnAttentionArgs& host_args);

}  // namespace gdn::capture
