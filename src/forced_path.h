// src/forced_path.h — internal entry points of the ops that force the CUDA backend's kernel choice
// (plan::Override) where the forced kernel can run: for the tests' kernel-path axis and `gdn bench
// --path`. Not part of the public API; on CPU tensors the override is ignored.
#pragma once
#include "cuda/plan/plan.h"
#include "gdn/ops.h"

namespace gdn::internal {
Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& args, void* stream, cuda::plan::Override force);
Status gated_delta_rule_chunked(const GatedDeltaRuleArgs& args, void* stream, cuda::plan::Override force);
Status gdn_attention(const GdnAttentionArgs& args, void* stream, cuda::plan::Override force);
}  // namespace gdn::internal
