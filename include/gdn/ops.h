// gdn/ops.h — the five operations of docs/contract.md §4: one argument struct and one entry per op.
//
// Every entry validates all arguments on the host before touching memory (docs/contract.md §5) and then
// dispatches on the tensors' device to the CPU or CUDA backend. `stream` is a cudaStream_t for
// CUDA tensors (nullptr: the default stream) and ignored on the CPU.
//
// Conventions shared by all ops:
//   * index tensors (query_start_loc, slots, remaps, num_accepted_tokens) are int32 or int64;
//   * has_initial_state is bool; absent means "true" for every sequence;
//   * every tensor is dense except in dim 0, whose stride may be larger (padded pools, row views);
//   * a slot < 0, a slot >= num_slots, or a slot == null_block_id marks a padded sequence
//     (docs/contract.md §3): its state is neither read nor written and its output rows are zero.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "gdn/status.h"
#include "gdn/tensor.h"

namespace gdn {

enum class Activation { kNone, kSilu };
enum class SpecConvLayout { kRolling, kPerToken };
enum class StateLayout { kVK, kKV };  // SSM pool [slots, HV, V, K] or [slots, HV, K, V]

Status parse_activation(const std::string& s, Activation* out);        // "silu"|"swish"|"none"|"identity"|""
Status parse_spec_conv_layout(const std::string& s, SpecConvLayout* out);  // "rolling"|"per_token"
Status parse_state_layout(const std::string& s, StateLayout* out);    // "vk"|"kv"
const char* to_string(Activation a);
const char* to_string(SpecConvLayout l);
const char* to_string(StateLayout l);

// 1. Varlen prefill convolution (non-speculative sequences).
struct CausalConv1dFwdArgs {
  TensorView x;                  // [T, D] activations (rows >= query_start_loc[n] untouched)
  TensorView weight;             // [D, W], dtype of x, 2 <= W <= 5
  TensorView bias;               // [D] or absent
  TensorView conv_state;         // [num_slots, rows >= W-1, D], dtype of x (updated)
  TensorView query_start_loc;    // [n+1]
  TensorView state_indices;      // [n]
  TensorView has_initial_state;  // [n] bool or absent
  TensorView y;                  // [T, D] output, dtype of x (may alias x)
  Activation activation = Activation::kSilu;
  std::optional<int64_t> null_block_id;
};

// 2. Decode / verify convolution.
struct CausalConv1dUpdateArgs {
  TensorView x;                    // [T, D]
  TensorView weight;               // [D, W]
  TensorView bias;                 // [D] or absent
  TensorView conv_state;           // [num_slots, rows, D] (updated)
  TensorView query_start_loc;      // [n+1]
  TensorView state_indices;        // [n] (non-spec) or [n, cols] (verify)
  TensorView num_accepted_tokens;  // [n]; present = verify (requires state_indices [n, cols])
  TensorView y;                    // [T, D]
  SpecConvLayout spec_layout = SpecConvLayout::kRolling;
  Activation activation = Activation::kSilu;
  std::optional<int64_t> null_block_id;
};

// 3./4. Gated delta rule. The same struct serves the recurrent op (decode, verify, short
// non-spec sequences) and the chunked op (non-spec only: num_accepted_tokens must be absent).
// The gates, per token and value head, come in two forms for each of the two (FLA's conventions):
//   decay: with A_log and dt_bias, a is the raw input, g = -exp(A_log) softplus(a + dt_bias);
//          without both, a is the log-space decay g itself;
//   write strength: beta_sigmoid, b is the raw logit, beta = sigmoid(b); else b is beta itself.
// qk_l2norm false: q and k are used as given (q^ = q scale, k^ = k).
struct GatedDeltaRuleArgs {
  TensorView q, k;                 // [T, H, K]
  TensorView v;                    // [T, HV, V]
  TensorView a, b;                 // [T, HV] gate inputs (see above), dtype of q or float32
  TensorView A_log;                // [HV] any float dtype, or absent (a is then the log-space decay)
  TensorView dt_bias;              // [HV] any float dtype; present exactly when A_log is
  TensorView ssm_state;            // [num_slots, HV, V, K] (vk) or [num_slots, HV, K, V] (kv)
  TensorView query_start_loc;      // [n+1]
  TensorView state_indices;        // [n] or [n, cols]
  TensorView num_accepted_tokens;  // [n]; present = verify
  TensorView has_initial_state;    // [n] bool or absent
  TensorView o;                    // [T, HV, V], dtype of q
  StateLayout state_layout = StateLayout::kVK;
  std::optional<double> scale;     // default K^-1/2
  std::optional<int64_t> null_block_id;
  bool qk_l2norm = true;           // q^ = q / |q| scale, k^ = k / |k| (eps 1e-6)
  bool beta_sigmoid = true;        // beta = sigmoid(b)
  // Deferred commit (docs/contract.md §7; gated_delta_rule_recurrent): present = on. Each
  // sequence owns one slot (state_indices [n]) holding its committed state, and the same slot of a
  // log [num_slots, log_cols, HV, K + V + 2] float32 holding its last verify step's tokens as the
  // recurrence consumed them (k^, v, g, beta per value head). num_accepted_tokens [n] is required:
  // how many logged tokens to replay before this step's tokens (clamped to [0, log_cols]; ignored
  // without an initial state). verify_log is read, verify_log_out written: two tensors of the same
  // shape that do not overlap (an engine alternates them from step to step).
  TensorView verify_log, verify_log_out;
  // Deferred: this step's tokens are drafts (true: the first log_cols are logged and the slot
  // keeps the state before them) or all accepted (false: the slot receives the state after them).
  bool log_tokens = true;
  // Deferred, token trees (docs/contract.md §7): token_parents [T] (index dtype), per token its
  // parent's index within its sequence, -1 for a root (the step's tokens form a tree; absent: a
  // chain). accepted_path [n, log_cols] (index dtype): the log rows to replay, in order, the first
  // num_accepted_tokens[i] of row i (absent: rows 0, 1, ...).
  TensorView token_parents, accepted_path;
  // CUDA, sm_90: the metadata tensors (query_start_loc, state indices, num_accepted_tokens,
  // has_initial_state) are already final when the kernel launched right before this op on the
  // stream starts, and that kernel does not write them. The op's kernels may then read them
  // before that kernel has finished (programmatic dependent launch), so their state loads start
  // earlier. Otherwise (the default) every read waits for the previous kernel. Ignored on the CPU.
  bool metadata_ready_early = false;
};
using GatedDeltaRuleRecurrentArgs = GatedDeltaRuleArgs;
using GatedDeltaRuleChunkedArgs = GatedDeltaRuleArgs;

// 5. The fused layer core over a mixed batch, with vllm-xpu-kernels' gdn_attention arguments.
struct GdnAttentionArgs {
  TensorView core_attn_out;      // [rows, HV/tp, V] (rows >= num_actual_tokens untouched)
  TensorView z;                  // [rows, HV/tp, V]
  TensorView projected_states_qkvz;  // [rows, H/tp * (2K + 2rV)]
  TensorView projected_states_ba;    // [rows, 2 HV/tp]
  int64_t num_k_heads = 0, num_v_heads = 0;  // global counts (divided by tp_size inside)
  int64_t head_k_dim = 0, head_v_dim = 0;
  TensorView conv_state;         // [num_slots, rows, D], D = 2 H K + HV V (per rank)
  TensorView ssm_state;          // [num_slots, HV, V, K] ("vk")
  TensorView conv_weights;       // [D, W]
  TensorView conv_bias;          // [D] or absent
  Activation activation = Activation::kSilu;
  TensorView A_log;              // [HV] any float dtype
  TensorView dt_bias;            // [HV]
  int64_t num_prefills = 0, num_decodes = 0, num_spec_decodes = 0;
  TensorView has_initial_state;              // [num_prefills + num_decodes] bool or absent
  TensorView non_spec_query_start_loc;       // [num_prefills + num_decodes + 1]
  TensorView non_spec_token_indx;            // [>= non-spec tokens] or absent (identity)
  TensorView non_spec_state_indices_tensor;  // [num_prefills + num_decodes]
  TensorView spec_query_start_loc;           // [num_spec_decodes + 1]
  TensorView spec_token_indx;                // [>= spec tokens] or absent (identity)
  TensorView spec_state_indices_tensor;      // [num_spec_decodes, cols]
  TensorView num_accepted_tokens;            // [num_spec_decodes]
  int64_t num_actual_tokens = 0;
  int64_t tp_size = 1;
  bool reorder_input = false;    // true: block layout [q|k|v|z]; false: per-key-head interleaved
  std::optional<double> scale;   // default K^-1/2
  std::optional<int64_t> null_block_id;
  // Verify sequences' conv windows (docs/contract.md §3): per token (vllm-xpu-kernels' gdn_attention: window =
  // rows 0..W-2 of the slot of column a-1, after token t rows 0..W-2 of the slot of column t;
  // conv_state rows >= W-1) or one rolling line in the slot of column 0 (rows >= W-2+cols).
  SpecConvLayout spec_conv_layout = SpecConvLayout::kPerToken;
  // CUDA, sm_90: the metadata tensors (query_start_loc, state indices, num_accepted_tokens,
  // has_initial_state) are already final when the kernel launched right before this op on the
  // stream starts, and that kernel does not write them. The op's kernels may then read them
  // before that kernel has finished (programmatic dependent launch), so their state loads start
  // earlier. Otherwise (the default) every read waits for the previous kernel. Ignored on the CPU.
  bool metadata_ready_early = false;
  // Deferred commit and token trees (docs/contract.md §7), present = on for both groups. A
  // sequence's slot is column 0 of its state indices; its committed conv window is rows 0..W-2 of
  // that conv_state slot. verify_log / verify_log_out as in GatedDeltaRuleArgs (the recurrence's
  // log); conv_log / conv_log_out [num_slots, log_cols, D] in the projections' dtype (the conv
  // inputs of the logged tokens). Verify sequences log their tokens, non-spec ones commit them.
  TensorView verify_log, verify_log_out, conv_log, conv_log_out;
  TensorView non_spec_num_accepted_tokens;  // [num_prefills + num_decodes] or absent (0): logged tokens to replay
  TensorView spec_accepted_path, non_spec_accepted_path;  // [n of the group, log_cols] or absent (rows 0, 1, ...)
  TensorView spec_token_parents;  // [>= spec tokens]: per local spec token its parent within its sequence; absent: chains
};

// Host-side argument validation (no memory is read through the pointers). Ok means the call is
// well formed; the backend may still report an unsupported configuration.
Status validate(const CausalConv1dFwdArgs& args);
Status validate(const CausalConv1dUpdateArgs& args);
Status validate_recurrent(const GatedDeltaRuleArgs& args);
Status validate_chunked(const GatedDeltaRuleArgs& args);
Status validate(const GdnAttentionArgs& args);

// validate + "does the backend of these tensors implement this configuration".
Status can_implement(const CausalConv1dFwdArgs& args);
Status can_implement(const CausalConv1dUpdateArgs& args);
Status can_implement_recurrent(const GatedDeltaRuleArgs& args);
Status can_implement_chunked(const GatedDeltaRuleArgs& args);
Status can_implement(const GdnAttentionArgs& args);

// The operations.
Status causal_conv1d_fwd(const CausalConv1dFwdArgs& args, void* stream = nullptr);
Status causal_conv1d_update(const CausalConv1dUpdateArgs& args, void* stream = nullptr);
Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& args, void* stream = nullptr);
Status gated_delta_rule_chunked(const GatedDeltaRuleArgs& args, void* stream = nullptr);
Status gdn_attention(const GdnAttentionArgs& args, void* stream = nullptr);

// Reads the (host-resident) metadata and reports the first value out of range: one the device would
// have to clamp, or that silently makes a sequence padding (a slot past the pool, a remap index
// outside the rows); and a slot two sequences would race on (docs/contract.md §3). Negative slots
// and null_block_id are padding by intent, not reported. Ok when all is valid.
// Index tensors must be on the CPU, and so must has_initial_state in the deferred-commit mode (it
// says whose replay counts are read).
Status check_metadata(const CausalConv1dFwdArgs& args);
Status check_metadata(const CausalConv1dUpdateArgs& args);
Status check_metadata(const GatedDeltaRuleArgs& args);
Status check_metadata(const GdnAttentionArgs& args);

// The CPU backend's worker threads per call: at most n, or with n < 1 (the default) the CPUs this
// process may run on (its affinity mask). Process-wide; results never depend on it. The torch
// binding sets it from torch.get_num_threads() before each call. cpu_threads() gives the limit in
// force.
void set_cpu_threads(int n);
int cpu_threads();

bool cuda_backend_available();  // built with CUDA and a device is present

}  // namespace gdn
