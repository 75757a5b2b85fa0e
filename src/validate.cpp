// Host-side validation of the primitive ops (docs/contract.md §5): causal_conv1d_fwd, causal_conv1d_update,
// gated_delta_rule_recurrent and gated_delta_rule_chunked. Shapes, dtypes, devices and layouts only:
// the metadata values live on the device and are the business of check_metadata.
#include <string>

#include "validate_util.h"

namespace gdn {

using validate_detail::activation_dtype;
using validate_detail::any_float_dtype;
using validate_detail::bool_dtype;
using validate_detail::check_slots_pair;
using validate_detail::index_dtype;
using validate_detail::kAnySize;
using validate_detail::Presence;
using validate_detail::like_q_or_float32;
using validate_detail::same_dtype_as;
using validate_detail::Validator;

namespace {

// The tensors both conv ops share: x [T, D], weight [D, W], bias [D]?, conv_state [slots, rows, D]
// (rows checked by the caller), y [T, D]. Sets *T, *D, *W.
template <typename Args>
Status check_conv_common(Validator& v, const Args& a, int64_t* T, int64_t* D, int64_t* W) {
  GDN_RETURN_IF_ERROR(v.activation(a.activation));
  GDN_RETURN_IF_ERROR(v.tensor("x", a.x, activation_dtype(), {{"T", kAnySize}, {"D", kAnySize}}));
  GDN_RETURN_IF_ERROR(v.positive("x", a.x, 1, "[T, D]", "D"));
  *T = a.x.shape[0];
  *D = a.x.shape[1];
  const auto like_x = same_dtype_as("x", a.x);
  GDN_RETURN_IF_ERROR(v.tensor("weight", a.weight, like_x, {{"D", *D}, {"W", kAnySize}}));
  GDN_RETURN_IF_ERROR(v.conv_width("weight", a.weight));
  *W = a.weight.shape[1];
  GDN_RETURN_IF_ERROR(v.tensor("bias", a.bias, like_x, {{"D", *D}}, Presence::kOptional));
  GDN_RETURN_IF_ERROR(validate_detail::contiguous_vector(v, "bias", a.bias));
  GDN_RETURN_IF_ERROR(
      v.tensor("conv_state", a.conv_state, like_x, {{"num_slots", kAnySize}, {"rows", kAnySize}, {"D", *D}}));
  GDN_RETURN_IF_ERROR(v.tensor("y", a.y, like_x, {{"T", *T}, {"D", *D}}));
  // In place (y is x itself) is exact; any other overlap would read outputs as inputs.
  const bool same = a.y.data == a.x.data && a.y.stride[0] == a.x.stride[0];
  if (!same && validate_detail::overlaps(a.x, a.y)) {
    return v.must("y", "x itself (same data and row stride: an in-place convolution) or memory that does not overlap x",
                  a.y);
  }
  GDN_RETURN_IF_ERROR(validate_detail::disjoint(v, {{"conv_state", &a.conv_state}, {"y", &a.y}}));
  return validate_detail::apart_from_inputs(v, {{"conv_state", &a.conv_state}}, {{"x", &a.x}});
}

Status check_conv_rows(const Validator& v, const TensorView& conv_state, int64_t need, const std::string& why) {
  if (conv_state.shape[1] >= need) return Status::Ok();
  return v.must("conv_state", "[num_slots, rows, D] with rows >= " + why + " = " + std::to_string(need), conv_state);
}

// Both gated delta rule ops; `chunked` admits non-speculative sequences only.
// Deferred commit (docs/contract.md §7): one slot per sequence, replay counts, two logs.
Status check_deferred(Validator& v, const GatedDeltaRuleArgs& a, bool chunked, int64_t HV, int64_t K, int64_t V,
                      int64_t* n) {
  if (chunked) return v.must("verify_log", "absent (deferred commit is a mode of gated_delta_rule_recurrent)", a.verify_log);
  GDN_RETURN_IF_ERROR(v.tensor("state_indices (deferred commit)", a.state_indices, index_dtype(), {{"n", kAnySize}}));
  *n = a.state_indices.shape[0];
  GDN_RETURN_IF_ERROR(v.tensor("num_accepted_tokens (deferred commit: tokens to replay)", a.num_accepted_tokens,
                               index_dtype(), {{"n", *n}}));
  const int64_t slots = a.ssm_state.shape[0];
  GDN_RETURN_IF_ERROR(v.tensor("verify_log", a.verify_log, validate_detail::float32_dtype(),
                               {{"num_slots", slots}, {"log_cols", kAnySize}, {"HV", HV}, {"K+V+2", K + V + 2}}));
  GDN_RETURN_IF_ERROR(v.positive("verify_log", a.verify_log, 1, "[num_slots, log_cols, HV, K+V+2]", "log_cols"));
  const int64_t cols = a.verify_log.shape[1];
  GDN_RETURN_IF_ERROR(v.tensor("verify_log_out", a.verify_log_out, validate_detail::float32_dtype(),
                               {{"num_slots", slots}, {"log_cols", cols}, {"HV", HV}, {"K+V+2", K + V + 2}}));
  const TensorView* others[] = {&a.verify_log, &a.ssm_state, &a.o};
  const char* names[] = {"verify_log", "ssm_state", "o"};
  for (int j = 0; j < 3; ++j)
    if (validate_detail::overlaps(a.verify_log_out, *others[j]))
      return v.must("verify_log_out", std::string("memory that does not overlap ") + names[j], a.verify_log_out);
  if (validate_detail::overlaps(a.verify_log, a.o) || validate_detail::overlaps(a.verify_log, a.ssm_state))
    return v.must("verify_log", "memory that does not overlap ssm_state or o", a.verify_log);
  GDN_RETURN_IF_ERROR(v.tensor("accepted_path", a.accepted_path, index_dtype(), {{"n", *n}, {"log_cols", cols}},
                               Presence::kOptional));
  GDN_RETURN_IF_ERROR(v.tensor("token_parents", a.token_parents, index_dtype(), {{"T", a.q.shape[0]}},
                               Presence::kOptional));
  if (a.token_parents.present() && !a.log_tokens)
    return v.fail("token_parents (a tree of draft tokens) requires log_tokens true");
  return Status::Ok();
}

Status check_gated_delta_rule(const char* op, const GatedDeltaRuleArgs& a, bool chunked) {
  Validator v(op);
  GDN_RETURN_IF_ERROR(v.state_layout(a.state_layout));
  GDN_RETURN_IF_ERROR(v.scale(a.scale));
  GDN_RETURN_IF_ERROR(v.tensor("q", a.q, activation_dtype(), {{"T", kAnySize}, {"H", kAnySize}, {"K", kAnySize}}));
  GDN_RETURN_IF_ERROR(v.positive("q", a.q, 1, "[T, H, K]", "H"));
  GDN_RETURN_IF_ERROR(v.positive("q", a.q, 2, "[T, H, K]", "K"));
  const int64_t T = a.q.shape[0], H = a.q.shape[1], K = a.q.shape[2];
  const auto like_q = same_dtype_as("q", a.q);
  GDN_RETURN_IF_ERROR(v.tensor("k", a.k, like_q, {{"T", T}, {"H", H}, {"K", K}}));
  GDN_RETURN_IF_ERROR(v.tensor("v", a.v, like_q, {{"T", T}, {"HV", kAnySize}, {"V", kAnySize}}));
  GDN_RETURN_IF_ERROR(v.positive("v", a.v, 1, "[T, HV, V]", "HV"));
  GDN_RETURN_IF_ERROR(v.positive("v", a.v, 2, "[T, HV, V]", "V"));
  const int64_t HV = a.v.shape[1], V = a.v.shape[2];
  if (HV % H != 0) {
    return v.fail("num_v_heads (HV = v dim 1) must be a multiple of num_k_heads (H = q dim 1), got HV = " +
                  std::to_string(HV) + ", H = " + std::to_string(H));
  }
  const auto gate_dtype = like_q_or_float32("q", a.q);
  GDN_RETURN_IF_ERROR(v.tensor("a", a.a, gate_dtype, {{"T", T}, {"HV", HV}}));
  GDN_RETURN_IF_ERROR(v.tensor("b", a.b, gate_dtype, {{"T", T}, {"HV", HV}}));
  // A_log and dt_bias: the decay computed from a (both), or a is the log-space decay (neither).
  if (a.A_log.present() != a.dt_bias.present()) {
    return v.fail(std::string("A_log and dt_bias must be given together (the decay computed from a) or both absent "
                              "(a is the log-space decay), got A_log ") + validate_detail::describe_view(a.A_log) +
                  ", dt_bias " + validate_detail::describe_view(a.dt_bias));
  }
  GDN_RETURN_IF_ERROR(v.tensor("A_log", a.A_log, any_float_dtype(), {{"HV", HV}}, Presence::kOptional));
  GDN_RETURN_IF_ERROR(v.tensor("dt_bias", a.dt_bias, any_float_dtype(), {{"HV", HV}}, Presence::kOptional));
  if (a.state_layout == StateLayout::kVK) {
    GDN_RETURN_IF_ERROR(v.tensor("ssm_state (state_layout vk)", a.ssm_state, activation_dtype(),
                                 {{"num_slots", kAnySize}, {"HV", HV}, {"V", V}, {"K", K}}));
  } else {
    GDN_RETURN_IF_ERROR(v.tensor("ssm_state (state_layout kv)", a.ssm_state, activation_dtype(),
                                 {{"num_slots", kAnySize}, {"HV", HV}, {"K", K}, {"V", V}}));
  }
  int64_t n = 0, cols = 1;
  bool verify = false;
  if (chunked) {
    if (a.num_accepted_tokens.present()) {
      return v.must("num_accepted_tokens", "absent (the chunked op serves non-speculative sequences)",
                    a.num_accepted_tokens);
    }
    if (a.state_indices.present() && a.state_indices.ndim != 1) {
      return v.must("state_indices", "int32 or int64 [n] (the chunked op serves non-speculative sequences)",
                    a.state_indices);
    }
  }
  if (!a.verify_log.present() && (a.token_parents.present() || a.accepted_path.present()))
    return v.must(a.token_parents.present() ? "token_parents" : "accepted_path",
                  "absent without verify_log (token trees are a deferred-commit mode)",
                  a.token_parents.present() ? a.token_parents : a.accepted_path);
  if (a.verify_log.present() || a.verify_log_out.present()) {
    GDN_RETURN_IF_ERROR(check_deferred(v, a, chunked, HV, K, V, &n));
  } else {
    GDN_RETURN_IF_ERROR(check_slots_pair(v, a.state_indices, a.num_accepted_tokens, &n, &cols, &verify));
  }
  GDN_RETURN_IF_ERROR(v.tensor("query_start_loc", a.query_start_loc, index_dtype(), {{"n+1", n + 1}}));
  GDN_RETURN_IF_ERROR(v.tensor("has_initial_state", a.has_initial_state, bool_dtype(), {{"n", n}}, Presence::kOptional));
  GDN_RETURN_IF_ERROR(v.tensor("o", a.o, like_q, {{"T", T}, {"HV", HV}, {"V", V}}));
  GDN_RETURN_IF_ERROR(validate_detail::disjoint(v, {{"ssm_state", &a.ssm_state}, {"o", &a.o}}));
  return validate_detail::apart_from_inputs(
      v, {{"ssm_state", &a.ssm_state}, {"o", &a.o}, {"verify_log_out", &a.verify_log_out}},
      {{"q", &a.q}, {"k", &a.k}, {"v", &a.v}, {"a", &a.a}, {"b", &a.b}, {"A_log", &a.A_log}, {"dt_bias", &a.dt_bias},
       {"query_start_loc", &a.query_start_loc}, {"state_indices", &a.state_indices},
       {"num_accepted_tokens", &a.num_accepted_tokens}, {"has_initial_state", &a.has_initial_state},
       {"verify_log", &a.verify_log}, {"accepted_path", &a.accepted_path}, {"token_parents", &a.token_parents}});
}

}  // namespace

Status validate(const CausalConv1dFwdArgs& a) {
  Validator v("causal_conv1d_fwd");
  int64_t T = 0, D = 0, W = 0;
  GDN_RETURN_IF_ERROR(check_conv_common(v, a, &T, &D, &W));
  GDN_RETURN_IF_ERROR(v.tensor("state_indices", a.state_indices, index_dtype(), {{"n", kAnySize}}));
  const int64_t n = a.state_indices.shape[0];
  GDN_RETURN_IF_ERROR(v.tensor("query_start_loc", a.query_start_loc, index_dtype(), {{"n+1", n + 1}}));
  GDN_RETURN_IF_ERROR(v.tensor("has_initial_state", a.has_initial_state, bool_dtype(), {{"n", n}}, Presence::kOptional));
  GDN_RETURN_IF_ERROR(check_conv_rows(v, a.conv_state, W - 1, "W-1"));
  return validate_detail::apart_from_inputs(
      v, {{"conv_state", &a.conv_state}, {"y", &a.y}},
      {{"weight", &a.weight}, {"bias", &a.bias}, {"query_start_loc", &a.query_start_loc},
       {"state_indices", &a.state_indices}, {"has_initial_state", &a.has_initial_state}});
}

Status validate(const CausalConv1dUpdateArgs& a) {
  Validator v("causal_conv1d_update");
  GDN_RETURN_IF_ERROR(v.spec_layout(a.spec_layout));
  int64_t T = 0, D = 0, W = 0;
  GDN_RETURN_IF_ERROR(check_conv_common(v, a, &T, &D, &W));
  int64_t n = 0, cols = 1;
  bool verify = false;
  GDN_RETURN_IF_ERROR(check_slots_pair(v, a.state_indices, a.num_accepted_tokens, &n, &cols, &verify));
  GDN_RETURN_IF_ERROR(v.tensor("query_start_loc", a.query_start_loc, index_dtype(), {{"n+1", n + 1}}));
  if (verify && n > 0 && a.spec_layout == SpecConvLayout::kRolling) {  // (no sequence: no rolling line)
    GDN_RETURN_IF_ERROR(check_conv_rows(v, a.conv_state, W - 2 + cols, "W-2+cols (rolling verify layout)"));
  } else {
    GDN_RETURN_IF_ERROR(check_conv_rows(v, a.conv_state, W - 1, "W-1"));
  }
  return validate_detail::apart_from_inputs(
      v, {{"conv_state", &a.conv_state}, {"y", &a.y}},
      {{"weight", &a.weight}, {"bias", &a.bias}, {"query_start_loc", &a.query_start_loc},
       {"state_indices", &a.state_indices}, {"num_accepted_tokens", &a.num_accepted_tokens}});
}

Status validate_recurrent(const GatedDeltaRuleArgs& a) {
  return check_gated_delta_rule("gated_delta_rule_recurrent", a, /*chunked=*/false);
}

Status validate_chunked(const GatedDeltaRuleArgs& a) {
  return check_gated_delta_rule("gated_delta_rule_chunked", a, /*chunked=*/true);
}

}  // namespace gdn
