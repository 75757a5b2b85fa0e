// Gated delta rule, token by token (docs/contract.md §1), CPU reference. Work item: (sequence, value head).
//   S = exp(g) S;  d = beta (v - S k^);  S = S + d k^T;  o = S q^
// Non-spec sequence: state from its slot (or zeros), final state back to it. Verify sequence:
// state from column a-1, state after token t into column t (t < cols).
#include <vector>

#include "cpu/backend.h"
#include "cpu/gdr_util.h"

namespace gdn::cpu {

Status gated_delta_rule_recurrent(const GatedDeltaRuleArgs& a) {
  const GdrShape s = gdr_shape(a);
  const int64_t n = a.state_indices.shape[0];
  auto valid = [&](int64_t slot) { return rules::slot_valid(slot, s.num_slots, s.has_null, s.null_id); };
  parallel_for(n * s.HV, [&](int64_t item) {
    const int64_t i = item / s.HV, hv = item % s.HV;
    const auto tr = sequence_tokens(a.query_start_loc, i, a.q.shape[0]);
    if (tr.len == 0) return;
    const int64_t slot0 = slot_of(a, i, 0);
    const int64_t acc = s.spec ? rules::accepted(load_index1(a.num_accepted_tokens, i), s.cols) : 1;
    const int64_t read_slot = s.spec ? slot_of(a, i, acc - 1) : slot0;
    if (!valid(slot0) || !valid(read_slot)) {
      for (int64_t t = 0; t < tr.len; ++t) zero_output(a, s, tr.begin + t, hv);
      return;
    }
    std::vector<float> S(static_cast<size_t>(s.V * s.K), 0.f);
    if (load_bool(a.has_initial_state, i, true)) load_state(a, s, read_slot, hv, S.data());
    TokenInputs in;
    for (int64_t t = 0; t < tr.len; ++t) {
      const int64_t row = tr.begin + t;
      load_token(a, s, row, hv, &in);
      const float decay = std::exp(in.g);
      for (int64_t vi = 0; vi < s.V; ++vi) {
        float* Sv = &S[vi * s.K];
        float sk = 0.f;
        for (int64_t ki = 0; ki < s.K; ++ki) {
          Sv[ki] *= decay;  // S = exp(g) S
          sk += Sv[ki] * in.k[ki];
        }
        const float d = in.beta * (in.v[vi] - sk);  // d = beta (v - S k)
        float o = 0.f;
        for (int64_t ki = 0; ki < s.K; ++ki) {
          Sv[ki] += d * in.k[ki];  // S += d k^T
          o += Sv[ki] * in.q[ki];  // o = S q
        }
        store_f(a.o.data, a.o.dtype, row * a.o.stride[0] + hv * s.V + vi, o);
      }
      if (s.spec && t < s.cols) {
        const int64_t slot = slot_of(a, i, t);
        if (valid(slot)) store_state(a, s, slot, hv, S.data());
      }
    }
    if (!s.spec) store_state(a, s, slot0, hv, S.data());
  });
  return Status::Ok();
}

}  // namespace gdn::cpu
