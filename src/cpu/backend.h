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

// gdn_attention's conv in the deferred mode (docs/contract.md §7), for one group of sequences:
// x / y [tokens, D] local rows, qsl [n+1], slots [n] (a usable slot or padding), per sequence the
// replay count (init false: none, from a zero window), optional path [n, log_cols] and parents
// [tokens] (local indices within the sequence), the conv logs [num_slots, log_cols, D].
struct DeferredConv {
  TensorView x, y, weight, bias, conv_state, qsl, slots, replay, init, path, parents, log, log_out;
  Activation activation = Activation::kSilu;
  bool log_tokens = true;
  std::optional<int64_t> null_block_id;
};
Status deferred_conv(const DeferredConv& args);
}  // namespace gdn::cpu
