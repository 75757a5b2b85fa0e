// tests/support/prop_ops.h — thin call wrappers over the capture runner for the property tests,
// and random inputs for the gated delta rule. Test code only.
#pragma once
#include <optional>

#include "prop_util.h"

namespace gdn::prop {

inline TensorView opt_view(Buf* b) { return b ? b->view() : absent(); }

inline CausalConv1dFwdArgs conv_fwd_args(Buf& x, Buf& w, Buf* bias, Buf& pool, Buf& qsl, Buf& slots, Buf* has_init,
                                         Buf& y, Activation act = Activation::kSilu,
                                         std::optional<int64_t> null_id = {}) {
  CausalConv1dFwdArgs a;
  a.x = x.view(); a.weight = w.view(); a.bias = opt_view(bias); a.conv_state = pool.view();
  a.query_start_loc = qsl.view(); a.state_indices = slots.view(); a.has_initial_state = opt_view(has_init);
  a.y = y.view(); a.activation = act; a.null_block_id = null_id;
  return a;
}
inline Status run_conv_fwd(Backend be, Buf& x, Buf& w, Buf* bias, Buf& pool, Buf& qsl, Buf& slots, Buf* has_init,
                           Buf& y, Activation act = Activation::kSilu, std::optional<int64_t> null_id = {}) {
  return capture::run_on(be, conv_fwd_args(x, w, bias, pool, qsl, slots, has_init, y, act, null_id));
}

inline CausalConv1dUpdateArgs conv_update_args(Buf& x, Buf& w, Buf* bias, Buf& pool, Buf& qsl, Buf& slots,
                                               Buf* nacc, Buf& y, SpecConvLayout layout,
                                               Activation act = Activation::kSilu,
                                               std::optional<int64_t> null_id = {}) {
  CausalConv1dUpdateArgs a;
  a.x = x.view(); a.weight = w.view(); a.bias = opt_view(bias); a.conv_state = pool.view();
  a.query_start_loc = qsl.view(); a.state_indices = slots.view(); a.num_accepted_tokens = opt_view(nacc);
  a.y = y.view(); a.spec_layout = layout; a.activation = act; a.null_block_id = null_id;
  return a;
}
inline Status run_conv_update(Backend be, Buf& x, Buf& w, Buf* bias, Buf& pool, Buf& qsl, Buf& slots, Buf* nacc,
                              Buf& y, SpecConvLayout layout, Activation act = Activation::kSilu,
                              std::optional<int64_t> null_id = {}) {
  return capture::run_on(be, conv_update_args(x, w, bias, pool, qsl, slots, nacc, y, layout, act, null_id));
}

// Inputs of the gated delta rule for T tokens.
struct GdrIn {
  int64_t T = 0, H = 0, HV = 0, K = 0, V = 0;
  Buf q, k, v, a, b, A_log, dt_bias;
};

// Per-head constants with the spread of real checkpoints: exp(A_log) in [e^-1, 16], dt_bias the
// inverse softplus of dt in [1e-3, 1e-1] (Mamba-style initialisation), so decays per token range
// from about -1e-3 to a few units.
inline void fill_gate_constants(GdrIn& g, Rng& r) {
  for (int64_t h = 0; h < g.HV; ++h) {
    g.A_log.set(h, r.uniform(-1.0, 2.77));
    double dt = std::exp(r.uniform(std::log(1e-3), std::log(1e-1)));
    g.dt_bias.set(h, std::log(std::expm1(dt)));
  }
}

inline GdrIn make_gdr_in(Rng& r, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V, DType act,
                         DType dt_bias_dtype) {
  GdrIn g;
  g.T = T; g.H = H; g.HV = HV; g.K = K; g.V = V;
  g.q = Buf(act, {T, H, K});
  g.k = Buf(act, {T, H, K});
  g.v = Buf(act, {T, HV, V});
  g.a = Buf(act, {T, HV});
  g.b = Buf(act, {T, HV});
  g.A_log = Buf(DType::kFloat32, {HV});
  g.dt_bias = Buf(dt_bias_dtype, {HV});
  fill_normal(g.q, r, 1.0);
  fill_normal(g.k, r, 1.0);
  fill_normal(g.v, r, 1.0);
  fill_normal(g.a, r, 1.0);
  fill_normal(g.b, r, 1.5);
  fill_gate_constants(g, r);
  return g;
}

// Token rows [begin, begin+n) of g as a new input (gate constants copied).
inline GdrIn slice_tokens(const GdrIn& g, const std::vector<int64_t>& rows) {
  GdrIn s;
  int64_t n = static_cast<int64_t>(rows.size());
  s.T = n; s.H = g.H; s.HV = g.HV; s.K = g.K; s.V = g.V;
  s.q = Buf(g.q.dtype(), {n, g.H, g.K});
  s.k = Buf(g.k.dtype(), {n, g.H, g.K});
  s.v = Buf(g.v.dtype(), {n, g.HV, g.V});
  s.a = Buf(g.a.dtype(), {n, g.HV});
  s.b = Buf(g.b.dtype(), {n, g.HV});
  for (int64_t i = 0; i < n; ++i) {
    copy_row(s.q, i, g.q, rows[i]);
    copy_row(s.k, i, g.k, rows[i]);
    copy_row(s.v, i, g.v, rows[i]);
    copy_row(s.a, i, g.a, rows[i]);
    copy_row(s.b, i, g.b, rows[i]);
  }
  s.A_log = g.A_log;
  s.dt_bias = g.dt_bias;
  return s;
}

inline GatedDeltaRuleArgs gdr_args(GdrIn& in, Buf& pool, StateLayout layout, Buf& qsl, Buf& slots, Buf* nacc,
                                   Buf* has_init, Buf& o, std::optional<int64_t> null_id = {}) {
  GatedDeltaRuleArgs a;
  a.q = in.q.view(); a.k = in.k.view(); a.v = in.v.view(); a.a = in.a.view(); a.b = in.b.view();
  a.A_log = in.A_log.view(); a.dt_bias = in.dt_bias.view(); a.ssm_state = pool.view();
  a.query_start_loc = qsl.view(); a.state_indices = slots.view(); a.num_accepted_tokens = opt_view(nacc);
  a.has_initial_state = opt_view(has_init); a.o = o.view(); a.state_layout = layout; a.null_block_id = null_id;
  return a;
}
inline Status run_gdr(Backend be, bool chunked, GdrIn& in, Buf& pool, StateLayout layout, Buf& qsl, Buf& slots,
                      Buf* nacc, Buf* has_init, Buf& o, std::optional<int64_t> null_id = {}) {
  GatedDeltaRuleArgs a = gdr_args(in, pool, layout, qsl, slots, nacc, has_init, o, null_id);
  return chunked ? capture::run_chunked_on(be, a) : capture::run_recurrent_on(be, a);
}

inline Buf make_ssm_pool(DType dt, int64_t slots, int64_t HV, int64_t K, int64_t V, StateLayout layout,
                         int64_t pad = 0) {
  std::vector<int64_t> shape = layout == StateLayout::kVK ? std::vector<int64_t>{slots, HV, V, K}
                                                          : std::vector<int64_t>{slots, HV, K, V};
  return Buf(dt, shape, HV * V * K + pad);
}

// Compares state slot s_got of got with slot s_ref of ref: bit-exact when tol == 0, else rel L2.
inline void expect_slot_close(const Buf& got, int64_t s_got, const Buf& ref, int64_t s_ref, double tol,
                              const std::string& what) {
  int64_t n = got.row_elems();
  if (tol == 0) {
    std::string d = bit_diff(got, s_got * n, ref, s_ref * n, n);
    EXPECT_EQ(d, "") << what << " (slot " << s_got << " vs " << s_ref << "): not bit-exact";
  } else {
    double e = rel_l2(got, ref, {{s_got * n, n}}, {{s_ref * n, n}});
    EXPECT_LE(e, tol) << what << " (slot " << s_got << " vs " << s_ref << "): rel L2 " << e;
  }
}

inline const char* layout_name(StateLayout l) { return to_string(l); }
inline const char* layout_name(SpecConvLayout l) { return to_string(l); }

}  // namespace gdn::prop
