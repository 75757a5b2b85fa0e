// src/cpu/backend.h — the CPU backend: plain loops from the math, float32 accumulation, threads
// over independent (sequence, head) items. Arguments are validated by the caller. Each op takes its
// scratch (scratch.h) before its first write, so a failed allocation changes nothing.
#pragma once
#include "cpu/scratch.h"
#include "gdn/ops.h"

namespace gdn::cpu {
Status causal_conv1d_fwd(const CausalConv1dFwdArgs& args);
Status causal_conv1d_update(const CausalConv1dUpdateArgs& args);
Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& args);
Status gated_delta_rule_chunked(const GatedDeltaRuleArgs& args);
Status gdn_attention(const GdnAttentionArgs& args);

// The ops gdn_attention composes, on scratch the caller took before its first write (for all of its
// phases at once): what each op's work items need, and the op on a Scratch that holds it (_on).
ScratchNeed conv_fwd_need(const CausalConv1dFwdArgs& args);
ScratchNeed conv_update_need(const CausalConv1dUpdateArgs& args);
ScratchNeed recurrent_need(const GatedDeltaRuleArgs& args);
Status causal_conv1d_fwd_on(const CausalConv1dFwdArgs& args, Scratch& scratch);
Status causal_conv1d_update_on(const CausalConv1dUpdateArgs& args, Scratch& scratch);
Status gated_delta_rule_recurrent_on(const GatedDeltaRuleArgs& args, Scratch& scratch);

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
ScratchNeed deferred_conv_need(const DeferredConv& args);
Status deferred_conv_on(const DeferredConv& args, Scratch& scratch);
}  // namespace gdn::cpu
