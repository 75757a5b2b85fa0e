// src/cuda/backend.h — the CUDA backend's entry points (arguments already validated on the host).
// `stream` is a cudaStream_t. supports_*() says whether a configuration has a kernel.
#pragma once
#include "cuda/plan/plan.h"
#include "gdn/ops.h"

namespace gdn::cuda {
bool available();  // a CUDA device is present
Status supports(const CausalConv1dFwdArgs& args);
Status supports(const CausalConv1dUpdateArgs& args);
Status supports_recurrent(const GatedDeltaRuleArgs& args);
Status supports_chunked(const GatedDeltaRuleArgs& args);
Status supports(const GdnAttentionArgs& args);
Status causal_conv1d_fwd(const CausalConv1dFwdArgs& args, void* stream);
Status causal_conv1d_update(const CausalConv1dUpdateArgs& args, void* stream);
// force: the planner's choice overridden where the forced kernel can run (plan/plan.h)
Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& args, void* stream, plan::Override force = {});
Status gated_delta_rule_chunked(const GatedDeltaRuleArgs& args, void* stream, plan::Override force = {});
Status gdn_attention(const GdnAttentionArgs& args, void* stream, plan::Override force = {});
}  // namespace gdn::cuda
