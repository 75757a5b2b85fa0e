// src/cpu/backend.h — the CPU backend: plain loops from the math, float32 accumulation, threads
// over independent (sequence, head) items. Arguments are validated by the caller.
#pragma once
#include "gdn/ops.h"

namespace gdn::cpu {
Status causal_conv1d_fwd(const CausalConv1dFwdArgs& args);
Status causal_conv1d_update(const CausalConv1dUpdateArgs& args);
Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& args);
Status gated_delta_rule_chunked(const GatedDeltaRuleArgs& args);
Status gdn_attention(const GdnAttentionArgs& args);
}  // namespace gdn::cpu
