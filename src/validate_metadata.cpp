// check_metadata (docs/contract.md §3, "Metadata the host cannot see"): reads the host-resident index
// tensors of a well-formed call and reports, in words, the first value the device would have to
// clamp or treat as padding:
//   1. query_start_loc[i] outside [0, limit] or decreasing (limit: rows of x / q; for
//      gdn_attention the token_indx length when given, else num_actual_tokens);
//   2. a slot >= num_slots (a negative slot or null_block_id is padding, not a violation); in the
//      deferred-commit mode only column 0 (the columns past it are never read);
//   3. for a verify sequence that is not padding: num_accepted_tokens[i] outside [1, cols], then
//      (where the slot of column a_i - 1 is usable too) T_i > cols; in the deferred-commit mode, a
//      replay count outside [0, log_cols] of a sequence that is not padding and has an initial
//      state (the count is ignored otherwise);
//   4. a remap index (gdn_attention token_indx) outside [0, num_actual_tokens);
//   5. a slot that one sequence writes and another sequence of the call (either group) reads or
//      writes: their updates would race (docs/contract.md §3).
// The index tensors must be on the CPU; the other tensors may live anywhere (only their shapes
// are used), so an engine can check a host copy of its metadata against device buffers.
#include <algorithm>
#include <string>
#include <vector>

#include "validate_util.h"

namespace gdn {

using validate_detail::describe_view;
using validate_detail::Validator;

namespace {

std::string str(int64_t x) { return std::to_string(x); }

// Element (i, j) of a 1-D or 2-D int32/int64 tensor (dim 0 may be strided).
int64_t read_index(const TensorView& t, int64_t i, int64_t j = 0) {
  const int64_t off = i * t.stride[0] + (t.ndim > 1 ? j * t.stride[1] : 0);
  if (t.dtype == DType::kInt32) return static_cast<const int32_t*>(t.data)[off];
  return static_cast<const int64_t*>(t.data)[off];
}

std::string element(const char* name, const TensorView& t, int64_t i, int64_t j = 0) {
  return std::string(name) + "[" + str(i) + (t.ndim > 1 ? ", " + str(j) : std::string()) + "]";
}

Status host_only(const Validator& v, const char* name, const TensorView& t) {
  if (!t.present() || t.device == Device::kCPU) return Status::Ok();
  return v.fail(std::string("check_metadata reads ") + name + " on the host, so it must be on cpu, got " +
                describe_view(t, true));
}

// The index tensors (already known to be on the CPU) take the device of `ref` in the copy that is
// validated, so that a host copy of the metadata may accompany device buffers.
void as_if_on(const TensorView& ref, TensorView* t) {
  if (!t->present() || t->device != Device::kCPU) return;
  t->device = ref.device;
  t->device_index = ref.device_index;
}

// One group of sequences sharing query_start_loc and a slot tensor.
struct Group {
  const char* qsl_name;
  TensorView qsl;  // [n+1]
  const char* slots_name;
  TensorView slots;  // [n] or [n, cols]
  TensorView nat;    // [n] when verify, else absent
  const char* remap_name;
  TensorView remap;  // gdn_attention token_indx, or absent
  int64_t token_limit;
  std::string limit_what;
  int64_t num_slots;
  std::string pool_what;
  int64_t num_actual_tokens;  // remap bound
  std::optional<int64_t> null_block_id;
  int64_t replay_cols = 0;  // deferred commit: nat holds replay counts in [0, replay_cols] (log_cols)
  bool deferred = false;    // deferred commit: one slot per sequence (column 0)
  TensorView has_init{};    // deferred commit: a sequence without an initial state replays nothing
  const char* nat_name = "num_accepted_tokens";
};

bool is_padding_slot(int64_t s, const std::optional<int64_t>& null_id) { return s < 0 || (null_id && s == *null_id); }

Status check_group(const Validator& v, const Group& g) {
  const int64_t n = g.slots.shape[0];
  const int64_t cols = g.slots.ndim > 1 ? g.slots.shape[1] : 1;
  for (int64_t i = 0; i <= n; ++i) {
    const int64_t q = read_index(g.qsl, i);
    if (q < 0 || q > g.token_limit) {
      return v.fail(element(g.qsl_name, g.qsl, i) + " = " + str(q) + " is outside [0, " + str(g.token_limit) + "] (" +
                    g.limit_what + ")");
    }
    if (i > 0 && q < read_index(g.qsl, i - 1)) {
      return v.fail(element(g.qsl_name, g.qsl, i) + " = " + str(q) + " is less than " +
                    element(g.qsl_name, g.qsl, i - 1) + " = " + str(read_index(g.qsl, i - 1)) +
                    " (query_start_loc must not decrease)");
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < (g.deferred ? 1 : cols); ++c) {
      const int64_t s = read_index(g.slots, i, c);
      if (is_padding_slot(s, g.null_block_id) || s < g.num_slots) continue;
      return v.fail(element(g.slots_name, g.slots, i, c) + " = " + str(s) + " is outside [0, " + str(g.num_slots) +
                    ") (the slots of " + g.pool_what + "; negative slots mark padding)");
    }
  }
  if (g.nat.present() && g.deferred) {  // replay counts
    for (int64_t i = 0; i < n; ++i) {
      if (is_padding_slot(read_index(g.slots, i, 0), g.null_block_id)) continue;
      // Read as a byte, nonzero true (as the backends read it: any byte of a reinterpreted tensor)
      if (g.has_init.present() && !static_cast<const uint8_t*>(g.has_init.data)[i * g.has_init.stride[0]]) continue;
      const int64_t a = read_index(g.nat, i);
      if (a < 0 || a > g.replay_cols) {
        return v.fail(element(g.nat_name, g.nat, i) + " = " + str(a) + " is outside [0, " + str(g.replay_cols) +
                      "] (replay counts: log_cols of the deferred-commit logs)");
      }
    }
  } else if (g.nat.present()) {
    for (int64_t i = 0; i < n; ++i) {
      if (is_padding_slot(read_index(g.slots, i, 0), g.null_block_id)) continue;
      const int64_t a = read_index(g.nat, i);
      if (a < 1 || a > cols) {
        return v.fail(element(g.nat_name, g.nat, i) + " = " + str(a) + " is outside [1, " + str(cols) + "] (cols of " +
                      g.slots_name + ")");
      }
      if (is_padding_slot(read_index(g.slots, i, a - 1), g.null_block_id)) continue;  // column a - 1: padding
      const int64_t lo = read_index(g.qsl, i), hi = read_index(g.qsl, i + 1);
      if (hi - lo > cols) {
        return v.fail("sequence " + str(i) + " has T = " + str(hi - lo) + " tokens (" + element(g.qsl_name, g.qsl, i) +
                      " = " + str(lo) + ", " + element(g.qsl_name, g.qsl, i + 1) + " = " + str(hi) +
                      "), more than cols = " + str(cols) + " of " + g.slots_name);
      }
    }
  }
  if (g.remap.present()) {
    for (int64_t j = read_index(g.qsl, 0); j < read_index(g.qsl, n); ++j) {
      const int64_t row = read_index(g.remap, j);
      if (row < 0 || row >= g.num_actual_tokens) {
        return v.fail(element(g.remap_name, g.remap, j) + " = " + str(row) + " is outside [0, " +
                      str(g.num_actual_tokens) + ") (num_actual_tokens)");
      }
    }
  }
  return Status::Ok();
}

// Check 5 over the groups of a call whose metadata passed checks 1-4: every slot a sequence that is
// not padding reads or writes (§3: a sequence of tokens writes its slot, a verify sequence reads
// column a-1 and writes columns t < T; in the deferred mode each sequence writes its one slot, a
// zero-length one included), then the first slot written by one sequence and used by another.
Status check_shared_slots(const Validator& v, const std::vector<Group>& groups) {
  struct Use {
    int64_t slot;
    bool writes;
    const Group* g;
    int64_t i, c;
  };
  std::vector<Use> uses;
  for (const Group& g : groups) {
    const Group* gp = &g;
    const int64_t n = g.slots.shape[0], cols = g.slots.ndim > 1 ? g.slots.shape[1] : 1;
    auto usable = [&](int64_t s) { return !is_padding_slot(s, g.null_block_id); };  // in range: check 2
    for (int64_t i = 0; i < n; ++i) {
      const int64_t T = std::max<int64_t>(0, read_index(g.qsl, i + 1) - read_index(g.qsl, i));
      const int64_t s0 = read_index(g.slots, i, 0);
      if (!usable(s0)) continue;
      if (g.deferred || (!g.nat.present() && T > 0)) {
        uses.push_back({s0, true, gp, i, 0});
        continue;
      }
      if (!g.nat.present() || T == 0) continue;
      const int64_t a = read_index(g.nat, i);  // in [1, cols]: check 3
      if (!usable(read_index(g.slots, i, a - 1))) continue;  // padding
      uses.push_back({read_index(g.slots, i, a - 1), false, gp, i, a - 1});
      for (int64_t t = 0; t < std::min(T, cols); ++t)
        if (usable(read_index(g.slots, i, t))) uses.push_back({read_index(g.slots, i, t), true, gp, i, t});
    }
  }
  std::stable_sort(uses.begin(), uses.end(), [](const Use& x, const Use& y) { return x.slot < y.slot; });
  for (size_t lo = 0, hi = 0; lo < uses.size(); lo = hi) {
    for (hi = lo; hi < uses.size() && uses[hi].slot == uses[lo].slot; ++hi) {}
    for (size_t w = lo; w < hi; ++w) {
      if (!uses[w].writes) continue;
      for (size_t o = lo; o < hi; ++o) {
        const Use& x = uses[w];
        const Use& y = uses[o];
        if (y.g == x.g && y.i == x.i) continue;
        return v.fail(element(x.g->slots_name, x.g->slots, x.i, x.c) + " = " + str(x.slot) + ", which sequence " +
                      str(x.i) + " writes, is also " + (y.writes ? "written" : "read") + " by sequence " + str(y.i) +
                      " (" + element(y.g->slots_name, y.g->slots, y.i, y.c) +
                      "): sequences of one call must not share a slot one of them writes");
      }
    }
  }
  return Status::Ok();
}

Group primitive_group(const TensorView& qsl, const TensorView& slots, const TensorView& nat, int64_t limit,
                      const char* limit_what, int64_t num_slots, const char* pool_what,
                      const std::optional<int64_t>& null_block_id) {
  return Group{"query_start_loc", qsl, "state_indices", slots, nat, nullptr, TensorView{}, limit, limit_what,
               num_slots,         pool_what, 0, null_block_id};
}

}  // namespace

Status check_metadata(const CausalConv1dFwdArgs& args) {
  const Validator v("causal_conv1d_fwd");
  GDN_RETURN_IF_ERROR(host_only(v, "query_start_loc", args.query_start_loc));
  GDN_RETURN_IF_ERROR(host_only(v, "state_indices", args.state_indices));
  CausalConv1dFwdArgs a = args;
  for (TensorView* t : {&a.query_start_loc, &a.state_indices, &a.has_initial_state}) as_if_on(a.x, t);
  GDN_RETURN_IF_ERROR(validate(a));
  const Group g = primitive_group(args.query_start_loc, args.state_indices, TensorView{}, args.x.shape[0], "rows of x",
                                  args.conv_state.shape[0], "conv_state", args.null_block_id);
  GDN_RETURN_IF_ERROR(check_group(v, g));
  return check_shared_slots(v, {g});
}

Status check_metadata(const CausalConv1dUpdateArgs& args) {
  const Validator v("causal_conv1d_update");
  GDN_RETURN_IF_ERROR(host_only(v, "query_start_loc", args.query_start_loc));
  GDN_RETURN_IF_ERROR(host_only(v, "state_indices", args.state_indices));
  GDN_RETURN_IF_ERROR(host_only(v, "num_accepted_tokens", args.num_accepted_tokens));
  CausalConv1dUpdateArgs a = args;
  for (TensorView* t : {&a.query_start_loc, &a.state_indices, &a.num_accepted_tokens}) as_if_on(a.x, t);
  GDN_RETURN_IF_ERROR(validate(a));
  const Group g = primitive_group(args.query_start_loc, args.state_indices, args.num_accepted_tokens,
                                  args.x.shape[0], "rows of x", args.conv_state.shape[0], "conv_state",
                                  args.null_block_id);
  GDN_RETURN_IF_ERROR(check_group(v, g));
  return check_shared_slots(v, {g});
}

Status check_metadata(const GatedDeltaRuleArgs& args) {
  const Validator v("gated_delta_rule");
  GDN_RETURN_IF_ERROR(host_only(v, "query_start_loc", args.query_start_loc));
  GDN_RETURN_IF_ERROR(host_only(v, "state_indices", args.state_indices));
  GDN_RETURN_IF_ERROR(host_only(v, "num_accepted_tokens", args.num_accepted_tokens));
  if (args.verify_log.present())  // the replay counts of sequences without an initial state are not read
    GDN_RETURN_IF_ERROR(host_only(v, "has_initial_state", args.has_initial_state));
  GatedDeltaRuleArgs a = args;
  for (TensorView* t : {&a.query_start_loc, &a.state_indices, &a.num_accepted_tokens, &a.has_initial_state}) {
    as_if_on(a.q, t);
  }
  GDN_RETURN_IF_ERROR(validate_recurrent(a));
  Group g = primitive_group(args.query_start_loc, args.state_indices, args.num_accepted_tokens, args.q.shape[0],
                            "rows of q", args.ssm_state.shape[0], "ssm_state", args.null_block_id);
  if (args.verify_log.present()) {
    g.deferred = true;
    g.replay_cols = args.verify_log.shape[1];
    g.has_init = args.has_initial_state;
  }
  GDN_RETURN_IF_ERROR(check_group(v, g));
  return check_shared_slots(v, {g});
}

Status check_metadata(const GdnAttentionArgs& args) {
  const Validator v("gdn_attention");
  const struct {
    const char* name;
    const TensorView& t;
  } host[] = {{"non_spec_query_start_loc", args.non_spec_query_start_loc},
              {"non_spec_token_indx", args.non_spec_token_indx},
              {"non_spec_state_indices_tensor", args.non_spec_state_indices_tensor},
              {"spec_query_start_loc", args.spec_query_start_loc},
              {"spec_token_indx", args.spec_token_indx},
              {"spec_state_indices_tensor", args.spec_state_indices_tensor},
              {"num_accepted_tokens", args.num_accepted_tokens},
              {"non_spec_num_accepted_tokens", args.non_spec_num_accepted_tokens}};
  for (const auto& h : host) GDN_RETURN_IF_ERROR(host_only(v, h.name, h.t));
  if (args.verify_log.present())  // the replay counts of sequences without an initial state are not read
    GDN_RETURN_IF_ERROR(host_only(v, "has_initial_state", args.has_initial_state));
  GdnAttentionArgs a = args;
  for (TensorView* t : {&a.non_spec_query_start_loc, &a.non_spec_token_indx, &a.non_spec_state_indices_tensor,
                        &a.spec_query_start_loc, &a.spec_token_indx, &a.spec_state_indices_tensor,
                        &a.num_accepted_tokens, &a.has_initial_state, &a.non_spec_num_accepted_tokens}) {
    as_if_on(a.projected_states_qkvz, t);
  }
  GDN_RETURN_IF_ERROR(validate(a));

  const int64_t num_slots = args.conv_state.shape[0];
  const bool deferred = args.verify_log.present();
  const int64_t log_cols = deferred ? args.verify_log.shape[1] : 0;
  const auto limit_of = [&](const TensorView& remap, const char* remap_name) {
    return remap.present() ? std::make_pair(remap.shape[0], std::string("length of ") + remap_name)
                           : std::make_pair(args.num_actual_tokens, std::string("num_actual_tokens"));
  };
  // A group with no sequences may leave its tensors out.
  std::vector<Group> groups;
  groups.reserve(2);
  if (args.non_spec_state_indices_tensor.present() && args.non_spec_query_start_loc.present()) {
    const auto limit = limit_of(args.non_spec_token_indx, "non_spec_token_indx");
    Group g{"non_spec_query_start_loc", args.non_spec_query_start_loc, "non_spec_state_indices_tensor",
            args.non_spec_state_indices_tensor, TensorView{}, "non_spec_token_indx", args.non_spec_token_indx,
            limit.first, limit.second, num_slots, "conv_state and ssm_state", args.num_actual_tokens,
            args.null_block_id};
    if (deferred) {
      g.nat = args.non_spec_num_accepted_tokens, g.nat_name = "non_spec_num_accepted_tokens";
      g.deferred = true, g.replay_cols = log_cols, g.has_init = args.has_initial_state;
    }
    GDN_RETURN_IF_ERROR(check_group(v, g));
    groups.push_back(g);
  }
  if (args.spec_state_indices_tensor.present() && args.spec_query_start_loc.present()) {
    const auto limit = limit_of(args.spec_token_indx, "spec_token_indx");
    Group g{"spec_query_start_loc", args.spec_query_start_loc, "spec_state_indices_tensor",
            args.spec_state_indices_tensor, args.num_accepted_tokens, "spec_token_indx", args.spec_token_indx,
            limit.first, limit.second, num_slots, "conv_state and ssm_state", args.num_actual_tokens,
            args.null_block_id};
    if (deferred) g.deferred = true, g.replay_cols = log_cols;
    GDN_RETURN_IF_ERROR(check_group(v, g));
    groups.push_back(g);
  }
  return check_shared_slots(v, groups);
}

}  // namespace gdn
