// Gated delta rule, token by token (docs/contract.md §1), CPU reference. Work item: (sequence, value head).
//   S = exp(g) S;  d = beta (v - S k^);  S = S + d k^T;  o = S q^
// Non-spec sequence: state from its slot (or zeros), final state back to it. Verify sequence:
// state from column a-1, state after token t into column t (t < cols). Deferred commit: state from
// the sequence's slot, the first a logged tokens replayed, that state back to the slot and this
// step's tokens logged (or, log_tokens false, the final state back to the slot); with token_parents
// each token's state is its parent's after its update (node states in scratch, never in the pool).
#include <algorithm>

#include "cpu/backend.h"
#include "cpu/gdr_util.h"

namespace gdn::cpu {
namespace {

// One work item's buffers: its state, a token's inputs and outputs, and (token trees) the states
// of up to tree_len nodes.
struct RecBufs {
  float *S, *o;
  TokenInputs in;
  float* nodes;
};
RecBufs rec_bufs(Arena& ar, const GdrShape& s, int64_t tree_len) {
  RecBufs b;
  b.S = ar.take<float>(elems(s.V, s.K));
  b.o = ar.take<float>(s.V);
  b.in = token_inputs(ar, s);
  b.nodes = ar.take<float>(elems(tree_len, s.V, s.K));
  return b;
}

GdrShape rec_shape(const GatedDeltaRuleArgs& a) {
  GdrShape s = gdr_shape(a);
  if (a.verify_log.present()) s.spec = false;  // deferred commit: the slot of each sequence is its only one
  return s;
}

// A token tree's node states: as many as its longest sequence has tokens (0 without a tree).
int64_t tree_len(const GatedDeltaRuleArgs& a) {
  if (!a.verify_log.present() || !a.token_parents.present()) return 0;
  int64_t m = 0;
  for (int64_t i = 0; i < a.state_indices.shape[0]; ++i)
    m = std::max(m, sequence_tokens(a.query_start_loc, i, a.q.shape[0]).len);
  return m;
}

}  // namespace

ScratchNeed recurrent_need(const GatedDeltaRuleArgs& a) {
  const GdrShape s = rec_shape(a);
  Arena m;
  rec_bufs(m, s, tree_len(a));
  return {elems(a.state_indices.shape[0], s.HV), m.used()};
}

Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& a) {
  Scratch sc(recurrent_need(a));
  return gated_delta_rule_recurrent_on(a, sc);
}

Status gated_delta_rule_recurrent_on(const GatedDeltaRuleArgs& a, Scratch& sc) {
  const bool deferred = a.verify_log.present();  // deferred commit: one slot, replay, log
  const GdrShape s = rec_shape(a);
  const int64_t n = a.state_indices.shape[0], log_cols = deferred ? a.verify_log.shape[1] : 0;
  const int64_t nodes_max = tree_len(a);
  auto valid = [&](int64_t slot) { return rules::slot_valid(slot, s.num_slots, s.has_null, s.null_id); };
  parallel_for(n * s.HV, sc, [&](int64_t item, Arena& ar) {
    const int64_t i = item / s.HV, hv = item % s.HV;
    const auto tr = sequence_tokens(a.query_start_loc, i, a.q.shape[0]);
    if (tr.len == 0 && !deferred) return;  // (deferred: the replay is committed all the same)
    const int64_t slot0 = slot_of(a, i, 0);
    const int64_t acc = s.spec ? rules::accepted(load_index1(a.num_accepted_tokens, i), s.cols) : 1;
    const int64_t read_slot = s.spec ? slot_of(a, i, acc - 1) : slot0;
    if (!valid(slot0) || !valid(read_slot)) {
      for (int64_t t = 0; t < tr.len; ++t) zero_output(a, s, tr.begin + t, hv);
      return;
    }
    const RecBufs b = rec_bufs(ar, s, nodes_max);
    float* const S = b.S;
    const bool init = load_bool(a.has_initial_state, i, true);
    if (init) load_state(a, s, read_slot, hv, S);
    else std::fill(S, S + s.V * s.K, 0.f);
    if (deferred) {  // replay the accepted tokens of the slot's log, then keep that state
      const int64_t n_replay = init ? std::clamp<int64_t>(load_index1(a.num_accepted_tokens, i), 0, log_cols) : 0;
      for (int64_t j = 0; j < n_replay; ++j) {
        const int64_t row = a.accepted_path.present() ? load_index2(a.accepted_path, i, j) : j;
        if (row < 0 || row >= log_cols) break;  // a path entry outside the log ends the replay
        const float* e = log_entry(a.verify_log, slot0, row, hv);
        update_state(S, s.V, s.K, e, e + s.K, e[s.K + s.V], e[s.K + s.V + 1]);
      }
      if (a.log_tokens || tr.len == 0) store_state(a, s, slot0, hv, S);
    }
    // token trees: each token's state from its parent's (node states kept here, never in the pool)
    const bool tree = deferred && a.token_parents.present();
    float* const nodes = b.nodes;
    TokenInputs in = b.in;
    float* const o = b.o;
    for (int64_t t = 0; t < tr.len; ++t) {
      const int64_t row = tr.begin + t;
      load_token(a, s, row, hv, &in);
      float* St = S;
      if (tree) {
        const int64_t par = load_index1(a.token_parents, row);  // outside [0, t): a root
        const float* from = par >= 0 && par < t ? &nodes[par * s.V * s.K] : S;
        St = &nodes[t * s.V * s.K];
        std::copy(from, from + s.V * s.K, St);
      }
      update_state(St, s.V, s.K, in.k, in.v, in.g, in.beta, in.q, o);
      for (int64_t vi = 0; vi < s.V; ++vi) store_f(a.o.data, a.o.dtype, row * a.o.stride[0] + hv * s.V + vi, o[vi]);
      if (deferred && a.log_tokens && t < log_cols) {  // log what this token's update consumed
        float* e = log_entry(a.verify_log_out, slot0, t, hv);
        std::copy(in.k, in.k + s.K, e);
        std::copy(in.v, in.v + s.V, e + s.K);
        e[s.K + s.V] = in.g;
        e[s.K + s.V + 1] = in.beta;
      }
      if (s.spec && t < s.cols) {
        const int64_t slot = slot_of(a, i, t);
        if (valid(slot)) store_state(a, s, slot, hv, S);
      }
    }
    if (!s.spec && !(deferred && (a.log_tokens || tr.len == 0))) store_state(a, s, slot0, hv, S);
  });
  return Status::Ok();
}

}  // namespace gdn::cpu
