// Gated delta rule, token by token (docs/contract.md §1), CPU reference. Work item: (sequence, value head).
//   S = exp(g) S;  d = beta (v - S k^);  S = S + d k^T;  o = S q^
// Non-spec sequence: state from its slot (or zeros), final state back to it. Verify sequence:
// state from column a-1, state after token t into column t (t < cols). Deferred commit: state from
// the sequence's slot, the first a logged tokens replayed, that state back to the slot and this
// step's tokens logged (or, log_tokens false, the final state back to the slot); with token_parents
// each token's state is its parent's after its update (node states in scratch, never in the pool).
#include <algorithm>
#include <vector>

#include "cpu/backend.h"
#include "cpu/gdr_util.h"

namespace gdn::cpu {

Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& a) {
  const bool deferred = a.verify_log.present();  // deferred commit: one slot, replay, log
  GdrShape s = gdr_shape(a);
  if (deferred) s.spec = false;  // the slot of each sequence is its only one
  const int64_t n = a.state_indices.shape[0], log_cols = deferred ? a.verify_log.shape[1] : 0;
  auto valid = [&](int64_t slot) { return rules::slot_valid(slot, s.num_slots, s.has_null, s.null_id); };
  parallel_for(n * s.HV, [&](int64_t item) {
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
    std::vector<float> S(static_cast<size_t>(s.V * s.K), 0.f), o(static_cast<size_t>(s.V));
    const bool init = load_bool(a.has_initial_state, i, true);
    if (init) load_state(a, s, read_slot, hv, S.data());
    if (deferred) {  // replay the accepted tokens of the slot's log, then keep that state
      const int64_t n_replay = init ? std::clamp<int64_t>(load_index1(a.num_accepted_tokens, i), 0, log_cols) : 0;
      for (int64_t j = 0; j < n_replay; ++j) {
        const int64_t row = a.accepted_path.present() ? load_index2(a.accepted_path, i, j) : j;
        if (row < 0 || row >= log_cols) break;  // a path entry outside the log ends the replay
        const float* e = log_entry(a.verify_log, slot0, row, hv);
        update_state(S.data(), s.V, s.K, e, e + s.K, e[s.K + s.V], e[s.K + s.V + 1]);
      }
      if (a.log_tokens || tr.len == 0) store_state(a, s, slot0, hv, S.data());
    }
    // token trees: each token's state from its parent's (node states kept here, never in the pool)
    const bool tree = deferred && a.token_parents.present();
    std::vector<float> nodes(tree ? static_cast<size_t>(tr.len * s.V * s.K) : 0);
    TokenInputs in;
    for (int64_t t = 0; t < tr.len; ++t) {
      const int64_t row = tr.begin + t;
      load_token(a, s, row, hv, &in);
      float* St = S.data();
      if (tree) {
        const int64_t par = load_index1(a.token_parents, row);  // outside [0, t): a root
        const float* from = par >= 0 && par < t ? &nodes[par * s.V * s.K] : S.data();
        St = &nodes[t * s.V * s.K];
        std::copy(from, from + s.V * s.K, St);
      }
      update_state(St, s.V, s.K, in.k.data(), in.v.data(), in.g, in.beta, in.q.data(), o.data());
      for (int64_t vi = 0; vi < s.V; ++vi) store_f(a.o.data, a.o.dtype, row * a.o.stride[0] + hv * s.V + vi, o[vi]);
      if (deferred && a.log_tokens && t < log_cols) {  // log what this token's update consumed
        float* e = log_entry(a.verify_log_out, slot0, t, hv);
        std::copy(in.k.begin(), in.k.end(), e);
        std::copy(in.v.begin(), in.v.end(), e + s.K);
        e[s.K + s.V] = in.g;
        e[s.K + s.V + 1] = in.beta;
      }
      if (s.spec && t < s.cols) {
        const int64_t slot = slot_of(a, i, t);
        if (valid(slot)) store_state(a, s, slot, hv, S.data());
      }
    }
    if (!s.spec && !(deferred && (a.log_tokens || tr.len == 0))) store_state(a, s, slot0, hv, S.data());
  });
  return Status::Ok();
}

}  // namespace gdn::cpu
