// tests/support/prop_deferred.h — gated_delta_rule_recurrent's deferred-commit mode (docs/contract.md
// §7) for the property tests: logs, the optional arguments of a call, and the entries a call writes.
// Test code only.
#pragma once
#include <optional>
#include <vector>

#include "prop_ops.h"

namespace gdn::prop {

// The CUDA backends (kernel paths) of the deferred-commit tests: the parameter axis of their suites.
inline std::vector<Backend> cuda_deferred_backends() {
  std::vector<Backend> v;
  for (Backend b : capture::test_backends(capture::Ops::kDeferred))
    if (b.cuda()) v.push_back(b);
  return v;
}

// A log [slots, cols, HV, K + V + 2], float32 zeros.
inline Buf deferred_log(int64_t slots, int64_t cols, int64_t HV, int64_t K, int64_t V) {
  Buf b(DType::kFloat32, {slots, cols, HV, K + V + 2});
  fill_value(b, 0.0);
  return b;
}

// Plausible logged tokens in every entry of `log` (keys of K values): unit keys, v, decays g <= 0,
// beta in (0, 1).
inline void fill_log(Buf& log, int64_t K, Rng& r) {
  const int64_t E = log.dim(3);
  fill_normal(log, r, 1.0);
  for (int64_t e0 = 0; e0 < log.numel(); e0 += E) {
    double kk = 0;
    for (int64_t c = 0; c < K; ++c) kk += log.get(e0 + c) * log.get(e0 + c);
    for (int64_t c = 0; c < K; ++c) log.set(e0 + c, log.get(e0 + c) / std::sqrt(kk));
    log.set(e0 + E - 2, -0.3 * std::fabs(log.get(e0 + E - 2)));
    log.set(e0 + E - 1, 1.0 / (1.0 + std::exp(-log.get(e0 + E - 1))));
  }
}

// The optional arguments of one deferred call, and the gate forms of ops.h.
struct DeferredOpts {
  Buf* has_init = nullptr;
  Buf* parents = nullptr;  // token_parents
  Buf* path = nullptr;     // accepted_path
  bool log_tokens = true;
  std::optional<int64_t> null_id;
  StateLayout layout = StateLayout::kVK;
  bool decay_given = false;  // a is the log-space decay (no A_log, dt_bias)
  bool beta_given = false;   // b is beta
  bool no_l2norm = false;    // q, k as given
};

inline GatedDeltaRuleArgs deferred_args(GdrIn& in, Buf& pool, Buf& qsl, Buf& slots, Buf& nacc, Buf& o, Buf& log_in,
                                        Buf& log_out, const DeferredOpts& op) {
  GatedDeltaRuleArgs a = gdr_args(in, pool, op.layout, qsl, slots, &nacc, op.has_init, o, op.null_id);
  a.verify_log = log_in.view();
  a.verify_log_out = log_out.view();
  a.log_tokens = op.log_tokens;
  if (op.parents) a.token_parents = op.parents->view();
  if (op.path) a.accepted_path = op.path->view();
  if (op.decay_given) a.A_log = a.dt_bias = TensorView{};
  a.beta_sigmoid = !op.beta_given;
  a.qk_l2norm = !op.no_l2norm;
  return a;
}

inline Status run_deferred_on(Backend be, GdrIn& in, Buf& pool, Buf& qsl, Buf& slots, Buf& nacc, Buf& o, Buf& log_in,
                              Buf& log_out, const DeferredOpts& op) {
  return capture::run_recurrent_on(be, deferred_args(in, pool, qsl, slots, nacc, o, log_in, log_out, op));
}

// Inputs whose gates fit the forms of `op`: with decay_given a holds g <= 0, with beta_given b holds
// beta in (0, 1), without the l2 norm q and k are of norm about 1.
inline void shape_gate_inputs(GdrIn& in, const DeferredOpts& op) {
  for (int64_t e = 0; e < in.a.numel(); ++e) {
    if (op.decay_given) in.a.set(e, -0.5 * std::fabs(in.a.get(e)));
    if (op.beta_given) in.b.set(e, 1.0 / (1.0 + std::exp(-in.b.get(e))));
  }
  if (op.no_l2norm)
    for (Buf* x : {&in.q, &in.k})
      for (int64_t e = 0; e < x->numel(); ++e) x->set(e, x->get(e) / std::sqrt(static_cast<double>(in.K)));
}

// Which log entries [slot, row] a call writes (docs/contract.md §7): the first min(T_i, log_cols)
// rows of each usable sequence's slot when log_tokens.
inline std::vector<std::vector<bool>> logged_entries(const std::vector<int64_t>& lens,
                                                     const std::vector<int64_t>& slots, int64_t num_slots,
                                                     int64_t log_cols, bool log_tokens,
                                                     std::optional<int64_t> null_id) {
  std::vector<std::vector<bool>> w(num_slots, std::vector<bool>(log_cols, false));
  if (!log_tokens) return w;
  for (size_t i = 0; i < lens.size(); ++i) {
    const int64_t s = slots[i];
    if (s < 0 || s >= num_slots || (null_id && *null_id == s)) continue;
    for (int64_t t = 0; t < std::min(lens[i], log_cols); ++t) w[s][t] = true;
  }
  return w;
}

// Compares two logs entry by entry: the written ones (rows of every value head) within relative L2
// tol, the others bit for bit with `before`.
inline void expect_logs(const Buf& got, const Buf& ref, const Buf& before,
                        const std::vector<std::vector<bool>>& written, double tol, const std::string& what) {
  const int64_t row = got.dim(2) * got.dim(3);
  for (size_t s = 0; s < written.size(); ++s)
    for (size_t j = 0; j < written[s].size(); ++j) {
      const int64_t at = (static_cast<int64_t>(s) * got.dim(1) + static_cast<int64_t>(j)) * row;
      if (written[s][j]) {
        const double e = rel_l2(got, ref, {{at, row}}, {{at, row}});
        EXPECT_LE(e, tol) << what << ": log entry [" << s << ", " << j << "] rel L2 " << e;
      } else {
        EXPECT_EQ(bit_diff(got, at, before, at, row), "") << what << ": log entry [" << s << ", " << j << "] written";
      }
    }
}

}  // namespace gdn::prop
