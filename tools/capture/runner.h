// tools/capture/runner.h — run an op on a chosen backend from host-resident arguments.
// For Backend::kCUDA every present tensor of the args is copied to the GPU (whole span, dim-0
// stride kept), the op runs on the default stream, and every tensor is copied back into the
// host buffers (so outputs and untouched bytes can be checked on the host).
// Test and tool code only; not part of the library.
#pragma once
#include <string>

#include "gdn/ops.h"

namespace gdn::capture {

enum class Backend { kCPU, kCUDA };
const char* backend_name(Backend b);
Status parse_backend(const std::string& s, Backend* out);
bool backend_available(Backend b);  // kCPU always; kCUDA if built with CUDA and a GPU is present

Status run_on(Backend b, const CausalConv1dFwdArgs& host_args);
Status run_on(Backend b, const CausalConv1dUpdateArgs& host_args);
Status run_recurrent_on(Backend b, const GatedDeltaRuleArgs& host_args);
Status run_chunked_on(Backend b, const GatedDeltaRuleArgs& host_args);
Status run_on(Backend b, const GdnAttentionArgs& host_args);

}  // namespace gdn::capture
