// bindings/torch/ops.cpp — the gdn torch library: schemas (registered once per process) and the CPU / CUDA
// implementations of the five ops of docs/contract.md §4, each a thin call of the C++ core (gdn/ops.h).
//
// Per op there is a functional form that allocates its output (y or o, zero-filled so rows no
// sequence covers are deterministic) and an `_out` form that writes a caller's buffer and returns
// nothing (CUDA-graph buffers; y may alias x in eager mode). gdn_attention writes core_attn_out and
// z in place, with vllm-xpu-kernels' argument list plus trailing `null_block_id=None` and
// `spec_conv_layout="per_token"`. The recurrent op and gdn_attention take the deferred-commit logs and
// token trees (docs/contract.md §7) as keyword-only arguments after all of those (None: off).
// Mutated tensors are annotated (Tensor(a!)) so torch.compile functionalizes the calls; the fake
// (shape-only) implementations live in python/gdn_kernels/_fake.py. No autograd: inference only.
//
// Device handling: a device guard on the first tensor, the caller's current CUDA stream, and the
// core's validation message raised as RuntimeError (it names the argument, the expected and the
// actual value). Tensors are passed as views with their strides, never copied.
#include <ATen/DeviceGuard.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/version.h>

#include <memory>
#include <string>

#include "tensor_view.h"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define GDN_TORCH_HAS_TAGS 1
#endif

namespace gdn::torch_binding {
namespace {

using at::Tensor;
template <typename T>
using Opt = c10::optional<T>;

std::optional<int64_t> opt_int(const Opt<int64_t>& v) {
  return v.has_value() ? std::optional<int64_t>(*v) : std::nullopt;
}
std::optional<double> opt_double(const Opt<double>& v) {
  return v.has_value() ? std::optional<double>(*v) : std::nullopt;
}

// Shape of an output [d0 of a, d1 of b, d2 of b, ...] when the inputs have the ranks the op needs,
// else an empty shape the core's validation rejects after naming the bad input.
Tensor zeros_2d(const Tensor& x) {
  if (x.dim() == 2) return at::zeros({x.size(0), x.size(1)}, x.options());
  return at::zeros({0, 0}, x.options());
}
Tensor zeros_o(const Tensor& q, const Tensor& v) {
  if (q.dim() == 3 && v.dim() == 3) return at::zeros({q.size(0), v.size(1), v.size(2)}, q.options());
  return at::zeros({0, 0, 0}, q.options());
}

// ---- 1. causal_conv1d_fwd -------------------------------------------------------------------
constexpr const char* kConvFwd = "causal_conv1d_fwd";

void causal_conv1d_fwd_into(const Tensor& y, const Tensor& x, const Tensor& weight, const Opt<Tensor>& bias,
                            const Tensor& conv_state, const Tensor& query_start_loc, const Tensor& state_indices,
                            const Opt<Tensor>& has_initial_state, const std::string& activation,
                            const Opt<int64_t>& null_block_id) {
  CausalConv1dFwdArgs a;
  Written w(kConvFwd);
  a.x = to_view(x, kConvFwd, "x");
  a.weight = to_view(weight, kConvFwd, "weight");
  a.bias = to_view(bias, kConvFwd, "bias");
  a.conv_state = w.view(conv_state, "conv_state");
  a.query_start_loc = to_view(query_start_loc, kConvFwd, "query_start_loc");
  a.state_indices = to_view(state_indices, kConvFwd, "state_indices");
  a.has_initial_state = to_view(has_initial_state, kConvFwd, "has_initial_state");
  a.y = w.view(y, "y");
  check(parse_activation(activation, &a.activation), kConvFwd);
  a.null_block_id = opt_int(null_block_id);
  w.done(gdn::causal_conv1d_fwd(a, prepare_call(x.device())));
}

Tensor causal_conv1d_fwd_op(const Tensor& x, const Tensor& weight, const Opt<Tensor>& bias, Tensor& conv_state,
                            const Tensor& query_start_loc, const Tensor& state_indices,
                            const Opt<Tensor>& has_initial_state, std::string activation,
                            Opt<int64_t> null_block_id) {
  c10::OptionalDeviceGuard guard(at::device_of(x));
  Tensor y = zeros_2d(x);
  causal_conv1d_fwd_into(y, x, weight, bias, conv_state, query_start_loc, state_indices, has_initial_state,
                         activation, null_block_id);
  return y;
}

void causal_conv1d_fwd_out_op(Tensor& y, const Tensor& x, const Tensor& weight, const Opt<Tensor>& bias,
                              Tensor& conv_state, const Tensor& query_start_loc, const Tensor& state_indices,
                              const Opt<Tensor>& has_initial_state, std::string activation,
                              Opt<int64_t> null_block_id) {
  c10::OptionalDeviceGuard guard(at::device_of(x));
  causal_conv1d_fwd_into(y, x, weight, bias, conv_state, query_start_loc, state_indices, has_initial_state,
                         activation, null_block_id);
}

// ---- 2. causal_conv1d_update ----------------------------------------------------------------
constexpr const char* kConvUpdate = "causal_conv1d_update";

void causal_conv1d_update_into(const Tensor& y, const Tensor& x, const Tensor& weight, const Opt<Tensor>& bias,
                               const Tensor& conv_state, const Tensor& query_start_loc, const Tensor& state_indices,
                               const Opt<Tensor>& num_accepted_tokens, const std::string& spec_layout,
                               const std::string& activation, const Opt<int64_t>& null_block_id) {
  CausalConv1dUpdateArgs a;
  Written w(kConvUpdate);
  a.x = to_view(x, kConvUpdate, "x");
  a.weight = to_view(weight, kConvUpdate, "weight");
  a.bias = to_view(bias, kConvUpdate, "bias");
  a.conv_state = w.view(conv_state, "conv_state");
  a.query_start_loc = to_view(query_start_loc, kConvUpdate, "query_start_loc");
  a.state_indices = to_view(state_indices, kConvUpdate, "state_indices");
  a.num_accepted_tokens = to_view(num_accepted_tokens, kConvUpdate, "num_accepted_tokens");
  a.y = w.view(y, "y");
  check(parse_spec_conv_layout(spec_layout, &a.spec_layout), kConvUpdate);
  check(parse_activation(activation, &a.activation), kConvUpdate);
  a.null_block_id = opt_int(null_block_id);
  w.done(gdn::causal_conv1d_update(a, prepare_call(x.device())));
}

Tensor causal_conv1d_update_op(const Tensor& x, const Tensor& weight, const Opt<Tensor>& bias, Tensor& conv_state,
                               const Tensor& query_start_loc, const Tensor& state_indices,
                               const Opt<Tensor>& num_accepted_tokens, std::string spec_layout,
                               std::string activation, Opt<int64_t> null_block_id) {
  c10::OptionalDeviceGuard guard(at::device_of(x));
  Tensor y = zeros_2d(x);
  causal_conv1d_update_into(y, x, weight, bias, conv_state, query_start_loc, state_indices, num_accepted_tokens,
                            spec_layout, activation, null_block_id);
  return y;
}

void causal_conv1d_update_out_op(Tensor& y, const Tensor& x, const Tensor& weight, const Opt<Tensor>& bias,
                                 Tensor& conv_state, const Tensor& query_start_loc, const Tensor& state_indices,
                                 const Opt<Tensor>& num_accepted_tokens, std::string spec_layout,
                                 std::string activation, Opt<int64_t> null_block_id) {
  c10::OptionalDeviceGuard guard(at::device_of(x));
  causal_conv1d_update_into(y, x, weight, bias, conv_state, query_start_loc, state_indices, num_accepted_tokens,
                            spec_layout, activation, null_block_id);
}

// ---- 3./4. gated_delta_rule_recurrent / _chunked ----------------------------------------------
constexpr const char* kRecurrent = "gated_delta_rule_recurrent";
constexpr const char* kChunked = "gated_delta_rule_chunked";

// The recurrent op's deferred-commit arguments (docs/contract.md §7); all absent for the chunked op.
struct GdrDeferred {
  const Opt<Tensor>* verify_log = nullptr;
  const Opt<Tensor>* verify_log_out = nullptr;
  bool log_tokens = true;
  const Opt<Tensor>* token_parents = nullptr;
  const Opt<Tensor>* accepted_path = nullptr;
};
TensorView opt_view(const Opt<Tensor>* t, const char* op, const char* name) {
  return t ? to_view(*t, op, name) : TensorView();
}

void gated_delta_rule_into(bool chunked, const Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& a_raw, const Tensor& b_raw, const Opt<Tensor>& A_log, const Opt<Tensor>& dt_bias,
                           const Tensor& ssm_state, const Tensor& query_start_loc, const Tensor& state_indices,
                           const Opt<Tensor>& num_accepted_tokens, const Opt<Tensor>& has_initial_state,
                           const Opt<double>& scale, const std::string& state_layout,
                           const Opt<int64_t>& null_block_id, bool qk_l2norm, bool beta_sigmoid,
                           const GdrDeferred& deferred = {}) {
  const char* op = chunked ? kChunked : kRecurrent;
  GatedDeltaRuleArgs a;
  Written w(op);
  a.q = to_view(q, op, "q");
  a.k = to_view(k, op, "k");
  a.v = to_view(v, op, "v");
  a.a = to_view(a_raw, op, "a");
  a.b = to_view(b_raw, op, "b");
  a.A_log = to_view(A_log, op, "A_log");
  a.dt_bias = to_view(dt_bias, op, "dt_bias");
  a.ssm_state = w.view(ssm_state, "ssm_state");
  a.query_start_loc = to_view(query_start_loc, op, "query_start_loc");
  a.state_indices = to_view(state_indices, op, "state_indices");
  a.num_accepted_tokens = to_view(num_accepted_tokens, op, "num_accepted_tokens");
  a.has_initial_state = to_view(has_initial_state, op, "has_initial_state");
  a.o = w.view(o, "o");
  check(parse_state_layout(state_layout, &a.state_layout), op);
  a.scale = opt_double(scale);
  a.null_block_id = opt_int(null_block_id);
  a.qk_l2norm = qk_l2norm;
  a.beta_sigmoid = beta_sigmoid;
  a.verify_log = opt_view(deferred.verify_log, op, "verify_log");
  if (deferred.verify_log_out) a.verify_log_out = w.view(*deferred.verify_log_out, "verify_log_out");
  a.log_tokens = deferred.log_tokens;
  a.token_parents = opt_view(deferred.token_parents, op, "token_parents");
  a.accepted_path = opt_view(deferred.accepted_path, op, "accepted_path");
  void* stream = prepare_call(q.device());
  w.done(chunked ? gdn::gated_delta_rule_chunked(a, stream) : gdn::gated_delta_rule_recurrent(a, stream));
}

Tensor gated_delta_rule_recurrent_op(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                     const Tensor& b, const Opt<Tensor>& A_log, const Opt<Tensor>& dt_bias, Tensor& ssm_state,
                                     const Tensor& query_start_loc, const Tensor& state_indices,
                                     const Opt<Tensor>& num_accepted_tokens, const Opt<Tensor>& has_initial_state,
                                     Opt<double> scale, std::string state_layout, Opt<int64_t> null_block_id, bool qk_l2norm, bool beta_sigmoid,
                                     const Opt<Tensor>& verify_log, const Opt<Tensor>& verify_log_out, bool log_tokens,
                                     const Opt<Tensor>& token_parents, const Opt<Tensor>& accepted_path) {
  c10::OptionalDeviceGuard guard(at::device_of(q));
  Tensor o = zeros_o(q, v);
  gated_delta_rule_into(false, o, q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices,
                        num_accepted_tokens, has_initial_state, scale, state_layout, null_block_id, qk_l2norm, beta_sigmoid,
                        {&verify_log, &verify_log_out, log_tokens, &token_parents, &accepted_path});
  return o;
}

void gated_delta_rule_recurrent_out_op(Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& a, const Tensor& b, const Opt<Tensor>& A_log, const Opt<Tensor>& dt_bias,
                                       Tensor& ssm_state, const Tensor& query_start_loc,
                                       const Tensor& state_indices, const Opt<Tensor>& num_accepted_tokens,
                                       const Opt<Tensor>& has_initial_state, Opt<double> scale,
                                       std::string state_layout, Opt<int64_t> null_block_id, bool qk_l2norm, bool beta_sigmoid,
                                       const Opt<Tensor>& verify_log, const Opt<Tensor>& verify_log_out, bool log_tokens,
                                       const Opt<Tensor>& token_parents, const Opt<Tensor>& accepted_path) {
  c10::OptionalDeviceGuard guard(at::device_of(q));
  gated_delta_rule_into(false, o, q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices,
                        num_accepted_tokens, has_initial_state, scale, state_layout, null_block_id, qk_l2norm, beta_sigmoid,
                        {&verify_log, &verify_log_out, log_tokens, &token_parents, &accepted_path});
}

Tensor gated_delta_rule_chunked_op(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                   const Tensor& b, const Opt<Tensor>& A_log, const Opt<Tensor>& dt_bias, Tensor& ssm_state,
                                   const Tensor& query_start_loc, const Tensor& state_indices,
                                   const Opt<Tensor>& has_initial_state, Opt<double> scale,
                                   std::string state_layout, Opt<int64_t> null_block_id, bool qk_l2norm, bool beta_sigmoid) {
  c10::OptionalDeviceGuard guard(at::device_of(q));
  Tensor o = zeros_o(q, v);
  gated_delta_rule_into(true, o, q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices,
                        c10::nullopt, has_initial_state, scale, state_layout, null_block_id, qk_l2norm, beta_sigmoid);
  return o;
}

void gated_delta_rule_chunked_out_op(Tensor& o, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                     const Tensor& b, const Opt<Tensor>& A_log, const Opt<Tensor>& dt_bias, Tensor& ssm_state,
                                     const Tensor& query_start_loc, const Tensor& state_indices,
                                     const Opt<Tensor>& has_initial_state, Opt<double> scale,
                                     std::string state_layout, Opt<int64_t> null_block_id, bool qk_l2norm, bool beta_sigmoid) {
  c10::OptionalDeviceGuard guard(at::device_of(q));
  gated_delta_rule_into(true, o, q, k, v, a, b, A_log, dt_bias, ssm_state, query_start_loc, state_indices,
                        c10::nullopt, has_initial_state, scale, state_layout, null_block_id, qk_l2norm, beta_sigmoid);
}

// ---- 5. gdn_attention ---------------------------------------------------------------------
constexpr const char* kAttention = "gdn_attention";

void gdn_attention_op(Tensor& core_attn_out, Tensor& z, const Tensor& projected_states_qkvz,
                      const Tensor& projected_states_ba, int64_t num_k_heads, int64_t num_v_heads,
                      int64_t head_k_dim, int64_t head_v_dim, Tensor& conv_state, Tensor& ssm_state,
                      const Tensor& conv_weights, const Opt<Tensor>& conv_bias, std::string activation,
                      const Tensor& A_log, const Tensor& dt_bias, int64_t num_prefills, int64_t num_decodes,
                      int64_t num_spec_decodes, const Opt<Tensor>& has_initial_state,
                      const Opt<Tensor>& non_spec_query_start_loc, const Opt<Tensor>& non_spec_token_indx,
                      const Opt<Tensor>& non_spec_state_indices_tensor, const Opt<Tensor>& spec_query_start_loc,
                      const Opt<Tensor>& spec_token_indx, const Opt<Tensor>& spec_state_indices_tensor,
                      const Opt<Tensor>& num_accepted_tokens, int64_t num_actual_tokens, int64_t tp_size,
                      bool reorder_input, Opt<int64_t> null_block_id, std::string spec_conv_layout,
                      const Opt<Tensor>& verify_log, const Opt<Tensor>& verify_log_out, const Opt<Tensor>& conv_log,
                      const Opt<Tensor>& conv_log_out, const Opt<Tensor>& non_spec_num_accepted_tokens,
                      const Opt<Tensor>& spec_accepted_path, const Opt<Tensor>& non_spec_accepted_path,
                      const Opt<Tensor>& spec_token_parents) {
  c10::OptionalDeviceGuard guard(at::device_of(projected_states_qkvz));
  const char* op = kAttention;
  GdnAttentionArgs a;
  Written w(op);
  a.core_attn_out = w.view(core_attn_out, "core_attn_out");
  a.z = w.view(z, "z");
  a.projected_states_qkvz = to_view(projected_states_qkvz, op, "projected_states_qkvz");
  a.projected_states_ba = to_view(projected_states_ba, op, "projected_states_ba");
  a.num_k_heads = num_k_heads;
  a.num_v_heads = num_v_heads;
  a.head_k_dim = head_k_dim;
  a.head_v_dim = head_v_dim;
  a.conv_state = w.view(conv_state, "conv_state");
  a.ssm_state = w.view(ssm_state, "ssm_state");
  a.conv_weights = to_view(conv_weights, op, "conv_weights");
  a.conv_bias = to_view(conv_bias, op, "conv_bias");
  check(parse_activation(activation, &a.activation), op);
  a.A_log = to_view(A_log, op, "A_log");
  a.dt_bias = to_view(dt_bias, op, "dt_bias");
  a.num_prefills = num_prefills;
  a.num_decodes = num_decodes;
  a.num_spec_decodes = num_spec_decodes;
  a.has_initial_state = to_view(has_initial_state, op, "has_initial_state");
  a.non_spec_query_start_loc = to_view(non_spec_query_start_loc, op, "non_spec_query_start_loc");
  a.non_spec_token_indx = to_view(non_spec_token_indx, op, "non_spec_token_indx");
  a.non_spec_state_indices_tensor = to_view(non_spec_state_indices_tensor, op, "non_spec_state_indices_tensor");
  a.spec_query_start_loc = to_view(spec_query_start_loc, op, "spec_query_start_loc");
  a.spec_token_indx = to_view(spec_token_indx, op, "spec_token_indx");
  a.spec_state_indices_tensor = to_view(spec_state_indices_tensor, op, "spec_state_indices_tensor");
  a.num_accepted_tokens = to_view(num_accepted_tokens, op, "num_accepted_tokens");
  a.num_actual_tokens = num_actual_tokens;
  a.tp_size = tp_size;
  a.reorder_input = reorder_input;
  a.null_block_id = opt_int(null_block_id);
  check(parse_spec_conv_layout(spec_conv_layout, &a.spec_conv_layout), op);
  a.verify_log = to_view(verify_log, op, "verify_log");
  a.verify_log_out = w.view(verify_log_out, "verify_log_out");
  a.conv_log = to_view(conv_log, op, "conv_log");
  a.conv_log_out = w.view(conv_log_out, "conv_log_out");
  a.non_spec_num_accepted_tokens = to_view(non_spec_num_accepted_tokens, op, "non_spec_num_accepted_tokens");
  a.spec_accepted_path = to_view(spec_accepted_path, op, "spec_accepted_path");
  a.non_spec_accepted_path = to_view(non_spec_accepted_path, op, "non_spec_accepted_path");
  a.spec_token_parents = to_view(spec_token_parents, op, "spec_token_parents");
  w.done(gdn::gdn_attention(a, prepare_call(projected_states_qkvz.device())));
}

// ---- schemas --------------------------------------------------------------------------------
// Argument lists shared by the functional and the _out form of an op.
#define GDN_CONV_FWD_ARGS                                                                               \
  "Tensor x, Tensor weight, Tensor? bias, Tensor(s!) conv_state, Tensor query_start_loc, "             \
  "Tensor state_indices, Tensor? has_initial_state=None, str activation=\"silu\", "                    \
  "int? null_block_id=None"
#define GDN_CONV_UPDATE_ARGS                                                                            \
  "Tensor x, Tensor weight, Tensor? bias, Tensor(s!) conv_state, Tensor query_start_loc, "             \
  "Tensor state_indices, Tensor? num_accepted_tokens=None, str spec_layout=\"rolling\", "              \
  "str activation=\"silu\", int? null_block_id=None"
#define GDN_GDR_HEAD_ARGS                                                                               \
  "Tensor q, Tensor k, Tensor v, Tensor a, Tensor b, Tensor? A_log, Tensor? dt_bias, Tensor(s!) ssm_state, " \
  "Tensor query_start_loc, Tensor state_indices, "
#define GDN_GDR_TAIL_ARGS \
  "Tensor? has_initial_state=None, float? scale=None, str state_layout=\"vk\", int? null_block_id=None, " \
  "bool qk_l2norm=True, bool beta_sigmoid=True"
// The recurrent op's deferred-commit mode and token trees (docs/contract.md §7), keyword-only.
#define GDN_GDR_DEFERRED_ARGS                                                                           \
  ", *, Tensor? verify_log=None, Tensor(l!)? verify_log_out=None, bool log_tokens=True, "              \
  "Tensor? token_parents=None, Tensor? accepted_path=None"

constexpr const char* kSchemas[] = {
    "causal_conv1d_fwd(" GDN_CONV_FWD_ARGS ") -> Tensor",
    "causal_conv1d_fwd_out(Tensor(y!) y, " GDN_CONV_FWD_ARGS ") -> ()",
    "causal_conv1d_update(" GDN_CONV_UPDATE_ARGS ") -> Tensor",
    "causal_conv1d_update_out(Tensor(y!) y, " GDN_CONV_UPDATE_ARGS ") -> ()",
    "gated_delta_rule_recurrent(" GDN_GDR_HEAD_ARGS "Tensor? num_accepted_tokens=None, " GDN_GDR_TAIL_ARGS
    GDN_GDR_DEFERRED_ARGS ") -> Tensor",
    "gated_delta_rule_recurrent_out(Tensor(o!) o, " GDN_GDR_HEAD_ARGS
    "Tensor? num_accepted_tokens=None, " GDN_GDR_TAIL_ARGS GDN_GDR_DEFERRED_ARGS ") -> ()",
    "gated_delta_rule_chunked(" GDN_GDR_HEAD_ARGS GDN_GDR_TAIL_ARGS ") -> Tensor",
    "gated_delta_rule_chunked_out(Tensor(o!) o, " GDN_GDR_HEAD_ARGS GDN_GDR_TAIL_ARGS ") -> ()",
    // vllm-xpu-kernels' argument list, unchanged, plus the trailing null_block_id and spec_conv_layout
    // (per_token, that call site's layout, by default), then keyword-only the deferred-commit logs and
    // token trees (docs/contract.md §7).
    "gdn_attention(Tensor(a!) core_attn_out, Tensor(b!) z, Tensor projected_states_qkvz, "
    "Tensor projected_states_ba, int num_k_heads, int num_v_heads, int head_k_dim, int head_v_dim, "
    "Tensor(c!) conv_state, Tensor(d!) ssm_state, Tensor conv_weights, Tensor? conv_bias, str activation, "
    "Tensor A_log, Tensor dt_bias, int num_prefills, int num_decodes, int num_spec_decodes, "
    "Tensor? has_initial_state, Tensor? non_spec_query_start_loc, Tensor? non_spec_token_indx, "
    "Tensor? non_spec_state_indices_tensor, Tensor? spec_query_start_loc, Tensor? spec_token_indx, "
    "Tensor? spec_state_indices_tensor, Tensor? num_accepted_tokens, int num_actual_tokens, int tp_size, "
    "bool reorder_input, int? null_block_id=None, str spec_conv_layout=\"per_token\", *, "
    "Tensor? verify_log=None, Tensor(e!)? verify_log_out=None, Tensor? conv_log=None, "
    "Tensor(f!)? conv_log_out=None, Tensor? non_spec_num_accepted_tokens=None, Tensor? spec_accepted_path=None, "
    "Tensor? non_spec_accepted_path=None, Tensor? spec_token_parents=None) -> ()",
};

#undef GDN_CONV_FWD_ARGS
#undef GDN_CONV_UPDATE_ARGS
#undef GDN_GDR_HEAD_ARGS
#undef GDN_GDR_TAIL_ARGS
#undef GDN_GDR_DEFERRED_ARGS

void register_impls(torch::Library& m) {
  m.impl("causal_conv1d_fwd", &causal_conv1d_fwd_op);
  m.impl("causal_conv1d_fwd_out", &causal_conv1d_fwd_out_op);
  m.impl("causal_conv1d_update", &causal_conv1d_update_op);
  m.impl("causal_conv1d_update_out", &causal_conv1d_update_out_op);
  m.impl("gated_delta_rule_recurrent", &gated_delta_rule_recurrent_op);
  m.impl("gated_delta_rule_recurrent_out", &gated_delta_rule_recurrent_out_op);
  m.impl("gated_delta_rule_chunked", &gated_delta_rule_chunked_op);
  m.impl("gated_delta_rule_chunked_out", &gated_delta_rule_chunked_out_op);
  m.impl("gdn_attention", &gdn_attention_op);
}

}  // namespace
}  // namespace gdn::torch_binding

namespace gdn::torch_binding {
namespace {

// The registration of the gdn namespace, once per process. torch's TORCH_LIBRARY registers from a
// static initializer and throws there when the namespace is taken, which aborts the process while
// the library loads: a second copy of this library (another build, or an installed copy beside the
// build tree) would take the interpreter down. A copy that finds gdn's ops registered registers
// nothing here (the first copy's ops serve), and no exception leaves the initializer.
struct Registration {
  std::unique_ptr<torch::Library> def, cpu, cuda;
  Registration() {
    try {
      if (c10::Dispatcher::singleton().findSchema(c10::OperatorName("gdn::gdn_attention", "")).has_value()) return;
      def.reset(new torch::Library(torch::Library::DEF, "gdn", {}, __FILE__, __LINE__));  // no dispatch key
      for (const char* schema : kSchemas) {
#ifdef GDN_TORCH_HAS_TAGS
        // Inductor keeps the strides of the arguments as given (padded pools, strided index views).
        def->def(schema, {at::Tag::needs_fixed_stride_order});
#else
        def->def(schema);
#endif
      }
      cpu = std::make_unique<torch::Library>(torch::Library::IMPL, "gdn", c10::DispatchKey::CPU, __FILE__, __LINE__);
      register_impls(*cpu);
      // Registered whatever the build: when the core has no CUDA backend, a call with CUDA tensors
      // gets the core's message saying so instead of a dispatcher error.
      cuda = std::make_unique<torch::Library>(torch::Library::IMPL, "gdn", c10::DispatchKey::CUDA, __FILE__, __LINE__);
      register_impls(*cuda);
    } catch (...) {  // nothing escapes a static initializer: the ops are then missing, not the process
    }
  }
};
const Registration kRegistration;

}  // namespace
}  // namespace gdn::torch_binding
