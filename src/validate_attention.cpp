// Host-side validation of gdn_attention (docs/contract.md §4, §5): head counts against tp_size, the
// projection widths, the pools, and the two groups of sequences (non-speculative and verify),
// whose tensors are required exactly when the group has sequences.
#include <cstdint>
#include <string>

#include "validate_util.h"

namespace gdn {

using validate_detail::activation_dtype;
using validate_detail::any_float_dtype;
using validate_detail::bool_dtype;
using validate_detail::float32_dtype;
using validate_detail::index_dtype;
using validate_detail::kAnySize;
using validate_detail::mul_add;
using validate_detail::Presence;
using validate_detail::same_dtype_as;
using validate_detail::Validator;

namespace {

std::string str(int64_t x) { return std::to_string(x); }

Status check_scalars(const Validator& v, const GdnAttentionArgs& a) {
  GDN_RETURN_IF_ERROR(v.activation(a.activation));
  GDN_RETURN_IF_ERROR(v.scale(a.scale));
  if (a.tp_size < 1) return v.fail("tp_size must be >= 1, got " + str(a.tp_size));
  const struct {
    const char* name;
    int64_t value;
  } positives[] = {{"num_k_heads", a.num_k_heads},
                   {"num_v_heads", a.num_v_heads},
                   {"head_k_dim", a.head_k_dim},
                   {"head_v_dim", a.head_v_dim}};
  for (const auto& p : positives) {
    if (p.value <= 0) return v.fail(std::string(p.name) + " must be > 0, got " + str(p.value));
  }
  const struct {
    const char* name;
    int64_t value;
  } counts[] = {{"num_prefills", a.num_prefills},
                {"num_decodes", a.num_decodes},
                {"num_spec_decodes", a.num_spec_decodes},
                {"num_actual_tokens", a.num_actual_tokens}};
  for (const auto& c : counts) {
    if (c.value < 0) return v.fail(std::string(c.name) + " must be >= 0, got " + str(c.value));
  }
  if (a.num_k_heads % a.tp_size != 0) {
    return v.fail("num_k_heads must be divisible by tp_size = " + str(a.tp_size) + ", got " + str(a.num_k_heads));
  }
  if (a.num_v_heads % a.tp_size != 0) {
    return v.fail("num_v_heads must be divisible by tp_size = " + str(a.tp_size) + ", got " + str(a.num_v_heads));
  }
  if (a.num_v_heads % a.num_k_heads != 0) {
    return v.fail("num_v_heads must be a multiple of num_k_heads = " + str(a.num_k_heads) + ", got " +
                  str(a.num_v_heads));
  }
  if (a.num_prefills > INT64_MAX - 1 - a.num_decodes || a.num_spec_decodes == INT64_MAX) {
    return v.fail("num_prefills + num_decodes + 1 and num_spec_decodes + 1 must fit in int64, got " +
                  str(a.num_prefills) + ", " + str(a.num_decodes) + ", " + str(a.num_spec_decodes));
  }
  return Status::Ok();
}

// num_actual_tokens <= the rows of a row-indexed buffer.
Status check_rows(const Validator& v, const char* name, const TensorView& t, int64_t num_actual_tokens) {
  if (t.shape[0] >= num_actual_tokens) return Status::Ok();
  return v.fail(std::string(name) + " must have at least num_actual_tokens = " + str(num_actual_tokens) +
                " rows, got " + validate_detail::describe_view(t));
}

// One group of sequences: query_start_loc [n+1], slots [n] (non-spec) or [n, cols] (spec).
// Required when n > 0; when n == 0 each may be absent, and a given one must still fit n.
struct GroupNames {
  const char* qsl;
  const char* slots;
  const char* token_indx;
  const char* count;  // "num_prefills + num_decodes" or "num_spec_decodes"
};

Status check_group(Validator& v, const GroupNames& g, int64_t n, const TensorView& qsl, const TensorView& slots,
                   const TensorView& token_indx, bool spec, int64_t* cols) {
  const Presence p = n > 0 ? Presence::kRequired : Presence::kOptional;
  const std::string count_plus_one = std::string(g.count) + " + 1";
  if (spec) {
    GDN_RETURN_IF_ERROR(v.tensor(g.slots, slots, index_dtype(), {{g.count, n}, {"cols", kAnySize}}, p));
    if (slots.present()) {
      GDN_RETURN_IF_ERROR(v.positive(g.slots, slots, 1, "[num_spec_decodes, cols]", "cols"));
      *cols = slots.shape[1];
    }
  } else {
    GDN_RETURN_IF_ERROR(v.tensor(g.slots, slots, index_dtype(), {{g.count, n}}, p));
  }
  GDN_RETURN_IF_ERROR(v.tensor(g.qsl, qsl, index_dtype(), {{count_plus_one.c_str(), n + 1}}, p));
  return v.tensor(g.token_indx, token_indx, index_dtype(), {{"tokens", kAnySize}}, Presence::kOptional);
}

}  // namespace

// Deferred commit (docs/contract.md §7): the four logs, the replay counts, paths and tree.
static Status check_deferred_attention(Validator& v, const GdnAttentionArgs& a, int64_t HV, int64_t K, int64_t V,
                                int64_t D, int64_t W, int64_t n_ns, int64_t n_spec) {
  const int64_t slots = a.conv_state.shape[0];
  GDN_RETURN_IF_ERROR(v.tensor("verify_log", a.verify_log, float32_dtype(),
                               {{"num_slots", slots}, {"log_cols", kAnySize}, {"HV/tp", HV}, {"K+V+2", K + V + 2}}));
  GDN_RETURN_IF_ERROR(v.positive("verify_log", a.verify_log, 1, "[num_slots, log_cols, HV/tp, K+V+2]", "log_cols"));
  const int64_t cols = a.verify_log.shape[1];
  GDN_RETURN_IF_ERROR(v.tensor("verify_log_out", a.verify_log_out, float32_dtype(),
                               {{"num_slots", slots}, {"log_cols", cols}, {"HV/tp", HV}, {"K+V+2", K + V + 2}}));
  const auto like = same_dtype_as("projected_states_qkvz", a.projected_states_qkvz);
  GDN_RETURN_IF_ERROR(v.tensor("conv_log", a.conv_log, like, {{"num_slots", slots}, {"log_cols", cols}, {"D", D}}));
  GDN_RETURN_IF_ERROR(v.tensor("conv_log_out", a.conv_log_out, like, {{"num_slots", slots}, {"log_cols", cols}, {"D", D}}));
  const TensorView* logs[] = {&a.verify_log, &a.verify_log_out, &a.conv_log, &a.conv_log_out};
  const char* names[] = {"verify_log", "verify_log_out", "conv_log", "conv_log_out"};
  const TensorView* outs[] = {&a.core_attn_out, &a.z, &a.conv_state, &a.ssm_state};
  for (int x = 0; x < 4; ++x) {
    for (int y = x + 1; y < 4; ++y)
      if (validate_detail::overlaps(*logs[x], *logs[y]))
        return v.must(names[y], std::string("memory that does not overlap ") + names[x], *logs[y]);
    for (const TensorView* o : outs)
      if (validate_detail::overlaps(*logs[x], *o))
        return v.must(names[x], "memory that does not overlap core_attn_out, z, conv_state or ssm_state", *logs[x]);
  }
  GDN_RETURN_IF_ERROR(v.tensor("non_spec_num_accepted_tokens", a.non_spec_num_accepted_tokens, index_dtype(),
                               {{"num_prefills + num_decodes", n_ns}}, Presence::kOptional));
  GDN_RETURN_IF_ERROR(v.tensor("non_spec_accepted_path", a.non_spec_accepted_path, index_dtype(),
                               {{"num_prefills + num_decodes", n_ns}, {"log_cols", cols}}, Presence::kOptional));
  GDN_RETURN_IF_ERROR(v.tensor("spec_accepted_path", a.spec_accepted_path, index_dtype(),
                               {{"num_spec_decodes", n_spec}, {"log_cols", cols}}, Presence::kOptional));
  const int64_t spec_limit = a.spec_token_indx.present() ? a.spec_token_indx.shape[0] : a.num_actual_tokens;
  GDN_RETURN_IF_ERROR(v.tensor("spec_token_parents", a.spec_token_parents, index_dtype(), {{"spec tokens", kAnySize}},
                               Presence::kOptional));
  if (a.spec_token_parents.present() && a.spec_token_parents.shape[0] < spec_limit)
    return v.must("spec_token_parents", "[>= spec tokens] (spec_token_indx's length, or num_actual_tokens) = [" +
                                            str(spec_limit) + "]", a.spec_token_parents);
  if (a.conv_state.shape[1] < W - 1)
    return v.must("conv_state", "[num_slots, rows, D] with rows >= W-1 (deferred commit) = " + str(W - 1), a.conv_state);
  return Status::Ok();
}

namespace {

// The shapes, dtypes and layouts (validate, below, adds the overlaps of written tensors with inputs).
Status check_attention(Validator& v, const GdnAttentionArgs& a) {
  GDN_RETURN_IF_ERROR(check_scalars(v, a));
  GDN_RETURN_IF_ERROR(v.spec_layout(a.spec_conv_layout, "spec_conv_layout"));
  const int64_t tp = a.tp_size, K = a.head_k_dim, V = a.head_v_dim;
  const int64_t H = a.num_k_heads / tp, HV = a.num_v_heads / tp, r = a.num_v_heads / a.num_k_heads;
  // qkvz width H (2K + 2rV), ba width 2 HV, conv channels D = 2 H K + HV V.
  int64_t rv = 0, group = 0, qkvz_width = 0, hk = 0, hk2 = 0, D = 0, ba_width = 0;
  if (!mul_add(r, V, K, &rv) || !mul_add(2, rv, 0, &group) || !mul_add(H, group, 0, &qkvz_width) ||
      !mul_add(H, K, 0, &hk) || !mul_add(2, hk, 0, &hk2) || !mul_add(HV, V, hk2, &D) ||
      !mul_add(2, HV, 0, &ba_width)) {
    return v.fail("num_k_heads, num_v_heads, head_k_dim and head_v_dim must give widths that fit in int64, got " +
                  str(a.num_k_heads) + ", " + str(a.num_v_heads) + ", " + str(K) + ", " + str(V));
  }

  const TensorView& qkvz = a.projected_states_qkvz;
  GDN_RETURN_IF_ERROR(v.tensor("projected_states_qkvz", qkvz, activation_dtype(),
                               {{"rows", kAnySize}, {"H/tp * (2K + 2rV)", qkvz_width}}));
  const auto like = same_dtype_as("projected_states_qkvz", qkvz);
  GDN_RETURN_IF_ERROR(v.tensor("projected_states_ba", a.projected_states_ba, like,
                               {{"rows", kAnySize}, {"2 HV/tp", ba_width}}));
  GDN_RETURN_IF_ERROR(
      v.tensor("core_attn_out", a.core_attn_out, like, {{"rows", kAnySize}, {"HV/tp", HV}, {"V", V}}));
  GDN_RETURN_IF_ERROR(v.tensor("z", a.z, like, {{"rows", kAnySize}, {"HV/tp", HV}, {"V", V}}));
  GDN_RETURN_IF_ERROR(check_rows(v, "projected_states_qkvz", qkvz, a.num_actual_tokens));
  GDN_RETURN_IF_ERROR(check_rows(v, "projected_states_ba", a.projected_states_ba, a.num_actual_tokens));
  GDN_RETURN_IF_ERROR(check_rows(v, "core_attn_out", a.core_attn_out, a.num_actual_tokens));
  GDN_RETURN_IF_ERROR(check_rows(v, "z", a.z, a.num_actual_tokens));

  GDN_RETURN_IF_ERROR(
      v.tensor("conv_weights", a.conv_weights, like, {{"D = 2 H/tp K + HV/tp V", D}, {"W", kAnySize}}));
  GDN_RETURN_IF_ERROR(v.conv_width("conv_weights", a.conv_weights));
  const int64_t W = a.conv_weights.shape[1];
  GDN_RETURN_IF_ERROR(v.tensor("conv_bias", a.conv_bias, like, {{"D", D}}, Presence::kOptional));
  GDN_RETURN_IF_ERROR(validate_detail::contiguous_vector(v, "conv_bias", a.conv_bias));
  GDN_RETURN_IF_ERROR(
      v.tensor("conv_state", a.conv_state, like, {{"num_slots", kAnySize}, {"rows", kAnySize}, {"D", D}}));
  const int64_t num_slots = a.conv_state.shape[0];
  GDN_RETURN_IF_ERROR(v.tensor("ssm_state", a.ssm_state, activation_dtype(),
                               {{"num_slots of conv_state", num_slots}, {"HV/tp", HV}, {"V", V}, {"K", K}}));
  GDN_RETURN_IF_ERROR(v.tensor("A_log", a.A_log, any_float_dtype(), {{"HV/tp", HV}}));
  GDN_RETURN_IF_ERROR(v.tensor("dt_bias", a.dt_bias, any_float_dtype(), {{"HV/tp", HV}}));
  GDN_RETURN_IF_ERROR(validate_detail::disjoint(v, {{"core_attn_out", &a.core_attn_out},
                                                   {"z", &a.z},
                                                   {"conv_state", &a.conv_state},
                                                   {"ssm_state", &a.ssm_state}}));

  const int64_t n_ns = a.num_prefills + a.num_decodes, n_spec = a.num_spec_decodes;
  int64_t cols = 1;
  GDN_RETURN_IF_ERROR(check_group(v,
                                  {"non_spec_query_start_loc", "non_spec_state_indices_tensor", "non_spec_token_indx",
                                   "num_prefills + num_decodes"},
                                  n_ns, a.non_spec_query_start_loc, a.non_spec_state_indices_tensor,
                                  a.non_spec_token_indx, /*spec=*/false, &cols));
  GDN_RETURN_IF_ERROR(v.tensor("has_initial_state", a.has_initial_state, bool_dtype(),
                               {{"num_prefills + num_decodes", n_ns}}, Presence::kOptional));
  GDN_RETURN_IF_ERROR(check_group(v,
                                  {"spec_query_start_loc", "spec_state_indices_tensor", "spec_token_indx",
                                   "num_spec_decodes"},
                                  n_spec, a.spec_query_start_loc, a.spec_state_indices_tensor, a.spec_token_indx,
                                  /*spec=*/true, &cols));
  GDN_RETURN_IF_ERROR(v.tensor("num_accepted_tokens", a.num_accepted_tokens, index_dtype(),
                               {{"num_spec_decodes", n_spec}}, n_spec > 0 ? Presence::kRequired : Presence::kOptional));

  if (a.verify_log.present() || a.verify_log_out.present() || a.conv_log.present() || a.conv_log_out.present())
    return check_deferred_attention(v, a, HV, K, V, D, W, n_ns, n_spec);
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"non_spec_num_accepted_tokens",
                                                                         &a.non_spec_num_accepted_tokens},
                                {"spec_accepted_path", &a.spec_accepted_path},
                                {"non_spec_accepted_path", &a.non_spec_accepted_path},
                                {"spec_token_parents", &a.spec_token_parents}})
    if (t->present()) return v.must(name, "absent without the deferred-commit logs (verify_log, conv_log)", *t);
  const bool rolling =  // (an empty verify group keeps no rolling line)
      a.spec_state_indices_tensor.present() && n_spec > 0 && a.spec_conv_layout == SpecConvLayout::kRolling;
  const int64_t need_rows = rolling ? W - 2 + cols : W - 1;
  if (a.conv_state.shape[1] < need_rows) {
    return v.must("conv_state",
                  std::string("[num_slots, rows, D] with rows >= ") +
                      (rolling ? "W-2+cols (spec_conv_layout rolling)" : "W-1") + " = " + str(need_rows),
                  a.conv_state);
  }
  return Status::Ok();
}

}  // namespace

Status validate(const GdnAttentionArgs& a) {
  Validator v("gdn_attention");
  GDN_RETURN_IF_ERROR(check_attention(v, a));
  return validate_detail::apart_from_inputs(
      v,
      {{"core_attn_out", &a.core_attn_out}, {"z", &a.z}, {"conv_state", &a.conv_state}, {"ssm_state", &a.ssm_state},
       {"verify_log_out", &a.verify_log_out}, {"conv_log_out", &a.conv_log_out}},
      {{"projected_states_qkvz", &a.projected_states_qkvz}, {"projected_states_ba", &a.projected_states_ba},
       {"conv_weights", &a.conv_weights}, {"conv_bias", &a.conv_bias}, {"A_log", &a.A_log}, {"dt_bias", &a.dt_bias},
       {"non_spec_query_start_loc", &a.non_spec_query_start_loc}, {"non_spec_token_indx", &a.non_spec_token_indx},
       {"non_spec_state_indices_tensor", &a.non_spec_state_indices_tensor},
       {"spec_query_start_loc", &a.spec_query_start_loc}, {"spec_token_indx", &a.spec_token_indx},
       {"spec_state_indices_tensor", &a.spec_state_indices_tensor}, {"num_accepted_tokens", &a.num_accepted_tokens},
       {"has_initial_state", &a.has_initial_state}, {"verify_log", &a.verify_log}, {"conv_log", &a.conv_log},
       {"non_spec_num_accepted_tokens", &a.non_spec_num_accepted_tokens},
       {"spec_accepted_path", &a.spec_accepted_path}, {"non_spec_accepted_path", &a.non_spec_accepted_path},
       {"spec_token_parents", &a.spec_token_parents}});
}

}  // namespace gdn
