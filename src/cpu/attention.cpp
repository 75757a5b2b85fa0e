// gdn_attention on the CPU: the composition the fused GPU kernel must reproduce.
// For each group (non-spec: prefills and decodes; spec: verify sequences) the group's tokens are
// gathered from their global rows into [q|k|v] conv input and a/b gate rows, the conv op and the
// recurrent op of this backend run on them, and outputs are scattered back to the global rows.
// z is copied for every row below num_actual_tokens.
#include <algorithm>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "common/attention_layout.h"
#include "cpu/backend.h"
#include "cpu/cpu_util.h"

namespace gdn::cpu {
namespace {

struct Group {
  bool spec;
  int64_t n;
  const TensorView* qsl;
  const TensorView* token_indx;
  const TensorView* state_indices;
  const TensorView* has_initial_state;    // non-spec only
  const TensorView* num_accepted_tokens;  // spec only
};

// One group's gathered inputs, local metadata and scratch, sized by the tokens its sequences use
// (not by the length of its token_indx), all allocated before the call writes anything.
struct GroupWork {
  int64_t used = 0, cols = 1;      // local tokens [0, used) belong to the group's sequences
  std::vector<int64_t> rows;       // global row of local token j (-1: outside [0, num_actual_tokens))
  std::vector<int64_t> qsl, slots; // local metadata (a sequence with a token outside the buffer: padding)
  std::vector<char> x, ab, y, o;   // conv input [q|k|v], gates (a | b), conv output, recurrence output
  std::vector<int64_t> col0, zeros;  // deferred commit: each sequence's slot (column 0), replay counts 0
};

// Reads the group's metadata and gathers its inputs; writes nothing the caller sees.
void prepare_group(const GdnAttentionArgs& a, const rules::ProjLayout& L, const Group& g, GroupWork* w) {
  if (g.n == 0) return;
  const DType act = a.projected_states_qkvz.dtype;
  const int64_t es = static_cast<int64_t>(dtype_size(act));
  const int64_t limit = g.token_indx->present() ? g.token_indx->shape[0] : a.num_actual_tokens;
  const int64_t HV = L.HV, D = L.D;
  w->cols = g.spec ? g.state_indices->shape[1] : 1;
  w->qsl.resize(static_cast<size_t>(g.n + 1));
  w->slots.resize(static_cast<size_t>(g.n * w->cols));
  for (int64_t i = 0; i <= g.n; ++i) w->qsl[i] = load_index1(*g.qsl, i);
  for (int64_t i = 0; i < g.n; ++i) {
    const auto tr = rules::token_range(w->qsl[i], w->qsl[i + 1], limit);
    w->used = std::max(w->used, tr.begin + tr.len);
  }
  const int64_t used = w->used;
  w->rows.resize(static_cast<size_t>(used));
  for (int64_t j = 0; j < used; ++j) {
    const int64_t r = g.token_indx->present() ? load_index1(*g.token_indx, j) : j;
    w->rows[j] = (r >= 0 && r < a.num_actual_tokens) ? r : -1;
  }
  for (int64_t i = 0; i < g.n; ++i) {
    for (int64_t c = 0; c < w->cols; ++c)
      w->slots[i * w->cols + c] = g.spec ? load_index2(*g.state_indices, i, c) : load_index1(*g.state_indices, i);
    const auto tr = rules::token_range(w->qsl[i], w->qsl[i + 1], used);  // = the range within `limit`
    bool pad = rules::runs_past(w->qsl[i], w->qsl[i + 1], limit);  // a token past the group's tokens
    for (int64_t t = 0; t < tr.len; ++t) pad = pad || w->rows[tr.begin + t] < 0;
    if (pad) w->slots[i * w->cols] = -1;  // padding (contract §3)
  }
  w->x.assign(static_cast<size_t>(used * D * es), 0);
  w->ab.assign(static_cast<size_t>(used * 2 * HV * es), 0);
  w->y.resize(w->x.size());
  w->o.resize(static_cast<size_t>(used * HV * L.V * es));
  if (a.verify_log.present()) {
    w->col0.resize(static_cast<size_t>(g.n));
    w->zeros.assign(static_cast<size_t>(g.n), 0);
    for (int64_t i = 0; i < g.n; ++i) w->col0[i] = w->slots[i * w->cols];
  }
  const char* qkvz = static_cast<const char*>(a.projected_states_qkvz.data);
  const char* ba = static_cast<const char*>(a.projected_states_ba.data);
  for (int64_t j = 0; j < used; ++j) {
    if (w->rows[j] < 0) continue;
    const char* src = qkvz + w->rows[j] * a.projected_states_qkvz.stride[0] * es;
    for (int64_t c = 0; c < D; ++c) std::memcpy(&w->x[(j * D + c) * es], src + L.conv_col(c) * es, es);
    const char* bsrc = ba + w->rows[j] * a.projected_states_ba.stride[0] * es;
    for (int64_t h = 0; h < HV; ++h) {
      std::memcpy(&w->ab[(j * 2 * HV + h) * es], bsrc + L.a_col(h) * es, es);       // a
      std::memcpy(&w->ab[(j * 2 * HV + HV + h) * es], bsrc + L.b_col(h) * es, es);  // b
    }
  }
}

// A prepared group's conv (prefill and decode, verify, or the deferred mode's) and recurrence, as
// the ops' arguments over its work buffers; built before the call writes anything.
struct GroupOps {
  enum Conv { kNone, kFwd, kUpdate, kDeferred } conv = kNone;
  CausalConv1dFwdArgs fwd;
  CausalConv1dUpdateArgs update;
  DeferredConv deferred;
  GatedDeltaRuleArgs r;

  ScratchNeed need() const {
    ScratchNeed n;
    if (conv == kNone) return n;
    n = conv == kFwd ? conv_fwd_need(fwd) : conv == kUpdate ? conv_update_need(update) : deferred_conv_need(deferred);
    n.add(recurrent_need(r));
    return n;
  }
};

GroupOps group_ops(const GdnAttentionArgs& a, const rules::ProjLayout& L, const Group& g, GroupWork& w) {
  GroupOps ops;
  if (g.n == 0) return ops;
  const DType act = a.projected_states_qkvz.dtype;
  const int64_t es = static_cast<int64_t>(dtype_size(act));
  const int64_t HV = L.HV, D = L.D, used = w.used, cols = w.cols;
  const TensorView qsl_v = make_view(w.qsl.data(), DType::kInt64, {g.n + 1});
  const TensorView slots_v = g.spec ? make_view(w.slots.data(), DType::kInt64, {g.n, cols})
                                    : make_view(w.slots.data(), DType::kInt64, {g.n});
  const TensorView x_v = make_view(w.x.data(), act, {used, D});
  const TensorView y_v = make_view(w.y.data(), act, {used, D});
  // Deferred commit (docs/contract.md §7): a sequence's slot is column 0 of its row, replay counts
  // (non-spec: given or 0).
  const bool deferred = a.verify_log.present();
  const TensorView slots_d = make_view(w.col0.data(), DType::kInt64, {g.n});
  TensorView replay_v = g.spec ? *g.num_accepted_tokens : a.non_spec_num_accepted_tokens;
  if (deferred && !replay_v.present()) replay_v = make_view(w.zeros.data(), DType::kInt64, {g.n});
  const TensorView path_v = g.spec ? a.spec_accepted_path : a.non_spec_accepted_path;
  TensorView parents_v;
  if (deferred && g.spec && a.spec_token_parents.present()) {
    parents_v = a.spec_token_parents;
    parents_v.shape[0] = used;  // local tokens [0, used) (validated: at least that long)
  }
  if (deferred) {
    DeferredConv& c = ops.deferred;
    ops.conv = GroupOps::kDeferred;
    c.x = x_v; c.y = y_v; c.weight = a.conv_weights; c.bias = a.conv_bias; c.conv_state = a.conv_state;
    c.qsl = qsl_v; c.slots = slots_d; c.replay = replay_v; c.init = g.spec ? TensorView{} : *g.has_initial_state;
    c.path = path_v; c.parents = parents_v; c.log = a.conv_log; c.log_out = a.conv_log_out;
    c.activation = a.activation; c.log_tokens = g.spec; c.null_block_id = a.null_block_id;
  } else if (g.spec) {
    CausalConv1dUpdateArgs& c = ops.update;
    ops.conv = GroupOps::kUpdate;
    c.x = x_v; c.weight = a.conv_weights; c.bias = a.conv_bias; c.conv_state = a.conv_state;
    c.query_start_loc = qsl_v; c.state_indices = slots_v; c.num_accepted_tokens = *g.num_accepted_tokens;
    c.y = y_v; c.spec_layout = a.spec_conv_layout; c.activation = a.activation;
    c.null_block_id = a.null_block_id;
  } else {
    CausalConv1dFwdArgs& c = ops.fwd;
    ops.conv = GroupOps::kFwd;
    c.x = x_v; c.weight = a.conv_weights; c.bias = a.conv_bias; c.conv_state = a.conv_state;
    c.query_start_loc = qsl_v; c.state_indices = slots_v; c.has_initial_state = *g.has_initial_state;
    c.y = y_v; c.activation = a.activation; c.null_block_id = a.null_block_id;
  }
  // Recurrence on the conv output: q, k, v are column ranges of y.
  GatedDeltaRuleArgs& r = ops.r;
  r.q = make_view(w.y.data(), act, {used, L.H, L.K});
  r.k = make_view(w.y.data() + L.H * L.K * es, act, {used, L.H, L.K});
  r.v = make_view(w.y.data() + 2 * L.H * L.K * es, act, {used, HV, L.V});
  r.q.stride[0] = r.k.stride[0] = r.v.stride[0] = D;
  r.a = make_view(w.ab.data(), act, {used, HV});
  r.b = make_view(w.ab.data() + HV * es, act, {used, HV});
  r.a.stride[0] = r.b.stride[0] = 2 * HV;
  r.A_log = a.A_log; r.dt_bias = a.dt_bias; r.ssm_state = a.ssm_state;
  r.query_start_loc = qsl_v; r.state_indices = slots_v;
  if (g.spec) r.num_accepted_tokens = *g.num_accepted_tokens;
  else r.has_initial_state = *g.has_initial_state;
  if (deferred) {
    r.state_indices = slots_d;
    r.num_accepted_tokens = replay_v;
    r.verify_log = a.verify_log; r.verify_log_out = a.verify_log_out;
    r.log_tokens = g.spec;
    r.accepted_path = path_v; r.token_parents = parents_v;
  }
  r.o = make_view(w.o.data(), act, {used, HV, L.V});
  r.state_layout = StateLayout::kVK;
  r.scale = a.scale;
  r.null_block_id = a.null_block_id;
  return ops;
}

// The conv and the recurrence of a prepared group, outputs scattered to their global rows.
Status run_group(const GdnAttentionArgs& a, const rules::ProjLayout& L, const Group& g, const GroupWork& w,
                 const GroupOps& ops, Scratch& sc) {
  if (g.n == 0) return Status::Ok();
  const DType act = a.projected_states_qkvz.dtype;
  const int64_t HV = L.HV, used = w.used;
  if (ops.conv == GroupOps::kDeferred) GDN_RETURN_IF_ERROR(cpu::deferred_conv_on(ops.deferred, sc));
  else if (ops.conv == GroupOps::kUpdate) GDN_RETURN_IF_ERROR(cpu::causal_conv1d_update_on(ops.update, sc));
  else GDN_RETURN_IF_ERROR(cpu::causal_conv1d_fwd_on(ops.fwd, sc));
  GDN_RETURN_IF_ERROR(cpu::gated_delta_rule_recurrent_on(ops.r, sc));
  // Scatter the outputs of every sequence's tokens to their global rows.
  const TensorView& out = a.core_attn_out;
  for (int64_t i = 0; i < g.n; ++i) {
    const auto tr = rules::token_range(w.qsl[i], w.qsl[i + 1], used);
    for (int64_t t = 0; t < tr.len; ++t) {
      const int64_t j = tr.begin + t;
      if (w.rows[j] < 0) continue;
      for (int64_t e = 0; e < HV * L.V; ++e)
        store_f(out.data, out.dtype, w.rows[j] * out.stride[0] + e, load_f(w.o.data(), act, j * HV * L.V + e));
    }
  }
  return Status::Ok();
}

}  // namespace

Status gdn_attention(const GdnAttentionArgs& a) {
  const rules::ProjLayout L = rules::proj_layout(a);
  const Group non_spec{false, a.num_prefills + a.num_decodes, &a.non_spec_query_start_loc, &a.non_spec_token_indx,
                       &a.non_spec_state_indices_tensor, &a.has_initial_state, nullptr};
  const Group spec{true, a.num_spec_decodes, &a.spec_query_start_loc, &a.spec_token_indx,
                   &a.spec_state_indices_tensor, nullptr, &a.num_accepted_tokens};
  // Everything that can fail (the scratch of both groups and of the ops they run) before the first
  // write (docs/contract.md §5).
  GroupWork w_ns, w_sp;
  GroupOps ops_ns, ops_sp;
  std::optional<Scratch> sc;
  try {
    prepare_group(a, L, non_spec, &w_ns);
    prepare_group(a, L, spec, &w_sp);
    ops_ns = group_ops(a, L, non_spec, w_ns);
    ops_sp = group_ops(a, L, spec, w_sp);
    ScratchNeed need = ops_ns.need();
    need.add(ops_sp.need());
    sc.emplace(need);
  } catch (const std::bad_alloc&) {
    return Status::Error("gdn_attention: out of host memory for the scratch of " + std::to_string(w_ns.used) +
                         " non-spec and " + std::to_string(w_sp.used) + " spec tokens (nothing was written)");
  }
  // z: a copy of its projection columns for every row below num_actual_tokens.
  const int64_t es = static_cast<int64_t>(dtype_size(a.z.dtype));
  const char* qkvz = static_cast<const char*>(a.projected_states_qkvz.data);
  char* z = static_cast<char*>(a.z.data);
  for (int64_t row = 0; row < a.num_actual_tokens; ++row)
    for (int64_t hv = 0; hv < L.HV; ++hv)
      for (int64_t vi = 0; vi < L.V; ++vi)
        std::memcpy(z + (row * a.z.stride[0] + hv * L.V + vi) * es,
                    qkvz + (row * a.projected_states_qkvz.stride[0] + L.z_col(hv, vi)) * es, es);
  GDN_RETURN_IF_ERROR(run_group(a, L, non_spec, w_ns, ops_ns, *sc));
  return run_group(a, L, spec, w_sp, ops_sp, *sc);
}

}  // namespace gdn::cpu
