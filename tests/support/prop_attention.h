// tests/support/prop_attention.h — gdn_attention problems for the property tests: a batch as a
// list of sequences (kind, global rows, slots), the metadata built from it, the projection
// layouts of docs/contract.md §2, and gdn_attention recomposed from the primitive ops. Test code only.
#pragma once
#include <algorithm>
#include <numeric>

#include "prop_ops.h"

namespace gdn::prop {

struct AttnSeq {
  bool spec = false;
  std::vector<int64_t> rows;   // global rows of the tokens, in token order
  int64_t slot = 0;            // non-spec
  std::vector<int64_t> cols;   // spec: state_indices row
  bool has_init = true;        // non-spec
  int64_t nacc = 1;            // spec
};

struct AttnProblem {
  // Per-rank sizes; the op receives num_k_heads = H * tp, num_v_heads = HV * tp.
  int64_t H = 2, HV = 4, K = 16, V = 8, W = 4, tp = 1;
  DType act = DType::kBFloat16, ssm_dtype = DType::kFloat32, index_dtype = DType::kInt32;
  Activation act_fn = Activation::kSilu;
  int64_t rows_alloc = 0, num_actual = 0, num_slots = 0, cols = 1;
  bool identity_ns = false, identity_spec = false;  // omit the token_indx tensors
  bool reorder = false;                             // layout of qkvz/ba below
  bool has_bias = true;
  std::optional<int64_t> null_id;
  // Verify conv windows: the rolling line (rows >= W-2+cols) or per draft slot (rows >= W-1);
  // conv_rows_extra: pool rows beyond the layout's minimum (never read or written).
  SpecConvLayout conv_layout = SpecConvLayout::kRolling;
  int64_t conv_rows_extra = 1;
  std::vector<AttnSeq> seqs;

  Buf qkvz, ba, weight, bias, A_log, dt_bias, conv_pool, ssm_pool;
  // Metadata, filled by build_meta().
  Buf ns_qsl, ns_indx, ns_slots, has_init, sp_qsl, sp_indx, sp_slots, nacc;
  int64_t num_prefills = 0, num_decodes = 0, num_spec = 0;

  int64_t r() const { return HV / H; }
  int64_t conv_rows() const { return (conv_layout == SpecConvLayout::kRolling ? W - 2 + cols : W - 1) + conv_rows_extra; }
  int64_t D() const { return 2 * H * K + HV * V; }
  int64_t qkvz_width() const { return H * (2 * K + 2 * r() * V); }
};

// Column of conv channel c (order [q heads, k heads, v heads]) in a qkvz row.
inline int64_t qkvz_col(const AttnProblem& p, bool reorder, int64_t c) {
  const int64_t HK = p.H * p.K, grp = 2 * p.K + 2 * p.r() * p.V;
  if (reorder) return c;
  if (c < HK) return (c / p.K) * grp + c % p.K;                       // q_g
  if (c < 2 * HK) return ((c - HK) / p.K) * grp + p.K + (c - HK) % p.K;  // k_g
  int64_t e = c - 2 * HK, hv = e / p.V, g = hv / p.r(), j = hv % p.r();
  return g * grp + 2 * p.K + j * p.V + e % p.V;                       // v_g
}
// Column of z element e = hv * V + vv.
inline int64_t z_col(const AttnProblem& p, bool reorder, int64_t e) {
  if (reorder) return p.D() + e;
  const int64_t grp = 2 * p.K + 2 * p.r() * p.V;
  int64_t hv = e / p.V, g = hv / p.r(), j = hv % p.r();
  return g * grp + 2 * p.K + p.r() * p.V + j * p.V + e % p.V;
}
inline int64_t b_col(const AttnProblem& p, bool reorder, int64_t hv) {
  return reorder ? hv : (hv / p.r()) * 2 * p.r() + hv % p.r();
}
inline int64_t a_col(const AttnProblem& p, bool reorder, int64_t hv) {
  return reorder ? p.HV + hv : (hv / p.r()) * 2 * p.r() + p.r() + hv % p.r();
}

// The same projections in the other layout (a pure column permutation).
inline void permute_projections(const AttnProblem& p, bool to_reorder, const Buf& qkvz, const Buf& ba, Buf* qkvz_out,
                                Buf* ba_out) {
  *qkvz_out = Buf(qkvz.dtype(), qkvz.shape(), qkvz.stride0());
  *ba_out = Buf(ba.dtype(), ba.shape(), ba.stride0());
  const bool from = !to_reorder;
  for (int64_t t = 0; t < qkvz.rows(); ++t) {
    const int64_t qw = p.qkvz_width(), bw = 2 * p.HV;
    for (int64_t c = 0; c < p.D(); ++c)
      qkvz_out->set_bits(t * qw + qkvz_col(p, to_reorder, c), qkvz.bits(t * qw + qkvz_col(p, from, c)));
    for (int64_t e = 0; e < p.HV * p.V; ++e)
      qkvz_out->set_bits(t * qw + z_col(p, to_reorder, e), qkvz.bits(t * qw + z_col(p, from, e)));
    for (int64_t h = 0; h < p.HV; ++h) {
      ba_out->set_bits(t * bw + b_col(p, to_reorder, h), ba.bits(t * bw + b_col(p, from, h)));
      ba_out->set_bits(t * bw + a_col(p, to_reorder, h), ba.bits(t * bw + a_col(p, from, h)));
    }
  }
}

inline void build_meta(AttnProblem& p) {
  std::vector<int64_t> ns_len, ns_rows, ns_slots, sp_len, sp_rows, sp_nacc;
  std::vector<std::vector<int64_t>> sp_slots;
  std::vector<bool> hinit;
  p.num_prefills = p.num_decodes = 0;
  for (const AttnSeq& s : p.seqs) {
    if (s.spec) {
      sp_len.push_back(static_cast<int64_t>(s.rows.size()));
      sp_rows.insert(sp_rows.end(), s.rows.begin(), s.rows.end());
      sp_slots.push_back(s.cols);
      sp_nacc.push_back(s.nacc);
    } else {
      ns_len.push_back(static_cast<int64_t>(s.rows.size()));
      ns_rows.insert(ns_rows.end(), s.rows.begin(), s.rows.end());
      ns_slots.push_back(s.slot);
      hinit.push_back(s.has_init);
      (s.rows.size() == 1 && s.has_init ? p.num_decodes : p.num_prefills)++;
    }
  }
  p.num_spec = static_cast<int64_t>(sp_len.size());
  p.ns_qsl = index_buf(prefix_sum(ns_len), p.index_dtype);
  p.ns_indx = index_buf(ns_rows, p.index_dtype);
  p.ns_slots = index_buf(ns_slots, p.index_dtype);
  p.has_init = bool_buf(hinit);
  p.sp_qsl = index_buf(prefix_sum(sp_len), p.index_dtype);
  p.sp_indx = index_buf(sp_rows, p.index_dtype);
  p.sp_slots = index_buf2(sp_slots, p.cols, p.index_dtype);
  p.nacc = index_buf(sp_nacc, p.index_dtype);
}

inline GdnAttentionArgs attention_args(AttnProblem& p, Buf& core, Buf& z) {
  GdnAttentionArgs a;
  a.core_attn_out = core.view();
  a.z = z.view();
  a.projected_states_qkvz = p.qkvz.view();
  a.projected_states_ba = p.ba.view();
  a.num_k_heads = p.H * p.tp;
  a.num_v_heads = p.HV * p.tp;
  a.head_k_dim = p.K;
  a.head_v_dim = p.V;
  a.conv_state = p.conv_pool.view();
  a.ssm_state = p.ssm_pool.view();
  a.conv_weights = p.weight.view();
  a.conv_bias = p.has_bias ? p.bias.view() : absent();
  a.activation = p.act_fn;
  a.A_log = p.A_log.view();
  a.dt_bias = p.dt_bias.view();
  a.num_prefills = p.num_prefills;
  a.num_decodes = p.num_decodes;
  a.num_spec_decodes = p.num_spec;
  if (p.num_prefills + p.num_decodes > 0) {
    a.has_initial_state = p.has_init.view();
    a.non_spec_query_start_loc = p.ns_qsl.view();
    a.non_spec_token_indx = p.identity_ns ? absent() : p.ns_indx.view();
    a.non_spec_state_indices_tensor = p.ns_slots.view();
  }
  if (p.num_spec > 0) {
    a.spec_query_start_loc = p.sp_qsl.view();
    a.spec_token_indx = p.identity_spec ? absent() : p.sp_indx.view();
    a.spec_state_indices_tensor = p.sp_slots.view();
    a.num_accepted_tokens = p.nacc.view();
  }
  a.num_actual_tokens = p.num_actual;
  a.tp_size = p.tp;
  a.reorder_input = p.reorder;
  a.null_block_id = p.null_id;
  a.spec_conv_layout = p.conv_layout;
  return a;
}

inline Status run_attention(Backend be, AttnProblem& p, Buf& core, Buf& z) {
  return capture::run_on(be, attention_args(p, core, z));
}

// gdn_attention recomposed: de-interleave each group's rows into x = [q|k|v] and a, b; run
// causal_conv1d_fwd (non-spec) or causal_conv1d_update (spec, p.conv_layout); split the conv output into
// q, k, v; run gated_delta_rule_recurrent; write o at the global rows; copy z for rows below
// num_actual_tokens.
inline Status compose_attention(Backend be, AttnProblem& p, Buf& core, Buf& z) {
  const int64_t D = p.D(), HK = p.H * p.K, qw = p.qkvz_width();
  for (int group = 0; group < 2; ++group) {
    const bool spec = group == 1;
    std::vector<int64_t> rows;
    for (const AttnSeq& s : p.seqs)
      if (s.spec == spec) rows.insert(rows.end(), s.rows.begin(), s.rows.end());
    const int64_t n_seq = spec ? p.num_spec : p.num_prefills + p.num_decodes;
    if (n_seq == 0) continue;
    const int64_t T = static_cast<int64_t>(rows.size());
    Buf x(p.act, {T, D}), y(p.act, {T, D});
    GdrIn g;
    g.T = T; g.H = p.H; g.HV = p.HV; g.K = p.K; g.V = p.V;
    g.q = Buf(p.act, {T, p.H, p.K});
    g.k = Buf(p.act, {T, p.H, p.K});
    g.v = Buf(p.act, {T, p.HV, p.V});
    g.a = Buf(p.act, {T, p.HV});
    g.b = Buf(p.act, {T, p.HV});
    g.A_log = p.A_log;
    g.dt_bias = p.dt_bias;
    for (int64_t j = 0; j < T; ++j) {
      for (int64_t c = 0; c < D; ++c) x.set_bits(j * D + c, p.qkvz.bits(rows[j] * qw + qkvz_col(p, p.reorder, c)));
      for (int64_t h = 0; h < p.HV; ++h) {
        g.a.set_bits(j * p.HV + h, p.ba.bits(rows[j] * 2 * p.HV + a_col(p, p.reorder, h)));
        g.b.set_bits(j * p.HV + h, p.ba.bits(rows[j] * 2 * p.HV + b_col(p, p.reorder, h)));
      }
    }
    Buf* bias = p.has_bias ? &p.bias : nullptr;
    if (spec) {
      GDN_RETURN_IF_ERROR(run_conv_update(be, x, p.weight, bias, p.conv_pool, p.sp_qsl, p.sp_slots, &p.nacc, y,
                                          p.conv_layout, p.act_fn, p.null_id));
    } else {
      GDN_RETURN_IF_ERROR(run_conv_fwd(be, x, p.weight, bias, p.conv_pool, p.ns_qsl, p.ns_slots, &p.has_init, y,
                                       p.act_fn, p.null_id));
    }
    for (int64_t j = 0; j < T; ++j) {
      copy_elems(g.q, j * HK, y, j * D, HK);
      copy_elems(g.k, j * HK, y, j * D + HK, HK);
      copy_elems(g.v, j * p.HV * p.V, y, j * D + 2 * HK, p.HV * p.V);
    }
    Buf o(p.act, {T, p.HV, p.V});
    if (spec) {
      GDN_RETURN_IF_ERROR(run_gdr(be, false, g, p.ssm_pool, StateLayout::kVK, p.sp_qsl, p.sp_slots, &p.nacc, nullptr,
                                  o, p.null_id));
    } else {
      GDN_RETURN_IF_ERROR(run_gdr(be, false, g, p.ssm_pool, StateLayout::kVK, p.ns_qsl, p.ns_slots, nullptr,
                                  &p.has_init, o, p.null_id));
    }
    for (int64_t j = 0; j < T; ++j) copy_row(core, rows[j], o, j);
  }
  const int64_t zr = p.HV * p.V;
  for (int64_t t = 0; t < p.num_actual; ++t)
    for (int64_t e = 0; e < zr; ++e) z.set_bits(t * zr + e, p.qkvz.bits(t * qw + z_col(p, p.reorder, e)));
  return Status::Ok();
}

struct MixOptions {
  int64_t n_prefill = 3, n_decode = 2, n_spec = 3, n_pad_ns = 1, n_pad_spec = 1;
  int64_t max_prefill = 20, graph_pad_rows = 5;
  bool interleave = true;      // random assignment of global rows to groups (each group ascending)
  bool permute_rows = false;   // fully random global row order instead
  bool trailing_empty = false; // a zero-length non-spec and spec sequence at the end (slot -1)
  std::vector<int64_t> prefill_lens;  // if given: the prefills' lengths (n_prefill ignored)
};

// A random mixed batch: prefills (incl. 1-token ones, some without initial state), decodes,
// ragged verify sequences, padding sequences; every row below num_actual_tokens belongs to a token.
inline void make_mixed_batch(AttnProblem& p, Rng& r, const MixOptions& m) {
  std::vector<AttnSeq> seqs;
  std::vector<int64_t> lens;
  auto add = [&](AttnSeq s, int64_t len) { seqs.push_back(std::move(s)); lens.push_back(len); };
  const int64_t n_prefill = m.prefill_lens.empty() ? m.n_prefill : static_cast<int64_t>(m.prefill_lens.size());
  for (int64_t i = 0; i < n_prefill; ++i) {
    AttnSeq s; s.has_init = r.coin(0.6);
    add(s, !m.prefill_lens.empty() ? m.prefill_lens[i] : i == 0 ? 1 : r.randint(2, m.max_prefill));
  }
  for (int64_t i = 0; i < m.n_decode; ++i) add(AttnSeq{}, 1);
  for (int64_t i = 0; i < m.n_pad_ns; ++i) { AttnSeq s; s.slot = -1; add(s, r.randint(1, 4)); }
  for (int64_t i = 0; i < m.n_spec + m.n_pad_spec; ++i) {
    AttnSeq s; s.spec = true;
    int64_t T = r.randint(1, p.cols);
    s.nacc = r.randint(1, p.cols);
    s.cols.assign(p.cols, 0);
    if (i >= m.n_spec) s.cols[0] = -1;
    add(s, T);
  }
  // Shuffle the order of sequences within each group (nothing may depend on it).
  for (int64_t i = static_cast<int64_t>(seqs.size()) - 1; i > 0; --i) {
    int64_t j = r.randint(0, i);
    if (seqs[i].spec == seqs[j].spec) { std::swap(seqs[i], seqs[j]); std::swap(lens[i], lens[j]); }
  }
  // Slots: distinct, random, with spares.
  int64_t need = 0;
  for (const AttnSeq& s : seqs) need += s.spec ? p.cols : 1;
  p.num_slots = need + 3;
  std::vector<int64_t> perm(p.num_slots);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = p.num_slots - 1; i > 0; --i) std::swap(perm[i], perm[r.randint(0, i)]);
  int64_t next = 0;
  for (AttnSeq& s : seqs) {
    if (s.spec) {
      bool pad = s.cols[0] == -1;
      for (int64_t c = 0; c < p.cols; ++c) s.cols[c] = perm[next++];
      if (pad) s.cols[0] = -1;
    } else {
      bool pad = s.slot == -1;
      s.slot = perm[next++];
      if (pad) s.slot = -1;
    }
  }
  // Global rows.
  int64_t total = std::accumulate(lens.begin(), lens.end(), int64_t{0});
  std::vector<int64_t> group_of_row;  // 0 non-spec, 1 spec
  int64_t n_ns = 0;
  for (size_t i = 0; i < seqs.size(); ++i) n_ns += seqs[i].spec ? 0 : lens[i];
  for (int64_t t = 0; t < total; ++t) group_of_row.push_back(t < n_ns ? 0 : 1);
  std::vector<int64_t> order(total);
  std::iota(order.begin(), order.end(), 0);
  if (m.interleave || m.permute_rows)
    for (int64_t i = total - 1; i > 0; --i) std::swap(order[i], order[r.randint(0, i)]);
  std::vector<int64_t> rows_ns, rows_sp;
  if (m.permute_rows) {
    for (int64_t t = 0; t < total; ++t) (t < n_ns ? rows_ns : rows_sp).push_back(order[t]);
  } else {
    // Assign group labels in a shuffled order, then hand out rows ascending per group.
    std::vector<int64_t> label(total);
    for (int64_t t = 0; t < total; ++t) label[order[t]] = group_of_row[t];
    for (int64_t t = 0; t < total; ++t) (label[t] == 0 ? rows_ns : rows_sp).push_back(t);
  }
  size_t ins = 0, isp = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (int64_t t = 0; t < lens[i]; ++t) seqs[i].rows.push_back(seqs[i].spec ? rows_sp[isp++] : rows_ns[ins++]);
  if (m.trailing_empty) {
    AttnSeq e; e.slot = -1; seqs.push_back(e);
    AttnSeq es; es.spec = true; es.cols.assign(p.cols, -1); seqs.push_back(es);
  }
  p.seqs = std::move(seqs);
  p.num_actual = total;
  p.rows_alloc = total + m.graph_pad_rows;
}

// Allocates the conv weights, bias, gate constants and both pools of p from its sizes and draws
// the weights, bias and constants (the pools stay zero).
inline void alloc_params_and_pools(AttnProblem& p, Rng& r) {
  p.weight = Buf(p.act, {p.D(), p.W});
  p.bias = Buf(p.act, {p.D()});
  fill_normal(p.weight, r, 0.5);
  fill_normal(p.bias, r, 0.2);
  GdrIn consts = make_gdr_in(r, 0, p.H, p.HV, p.K, p.V, p.act, p.act);
  p.A_log = consts.A_log;
  p.dt_bias = consts.dt_bias;
  const int64_t conv_rows = p.conv_rows();
  p.conv_pool = Buf(p.act, {p.num_slots, conv_rows, p.D()}, conv_rows * p.D() + 8);
  p.ssm_pool = make_ssm_pool(p.ssm_dtype, p.num_slots, p.HV, p.K, p.V, StateLayout::kVK, 16);
}

// Allocates and fills the tensors of p (after make_mixed_batch or a hand-made p.seqs).
inline void fill_attention_data(AttnProblem& p, Rng& r) {
  p.qkvz = Buf(p.act, {p.rows_alloc, p.qkvz_width()});
  p.ba = Buf(p.act, {p.rows_alloc, 2 * p.HV});
  fill_normal(p.qkvz, r, 1.0);
  fill_normal(p.ba, r, 1.0);
  alloc_params_and_pools(p, r);
  fill_normal(p.conv_pool, r, 1.0);
  fill_normal(p.ssm_pool, r, 0.3);
  build_meta(p);
}

inline std::string describe(const AttnProblem& p) {
  std::ostringstream s;
  s << "H=" << p.H << " HV=" << p.HV << " K=" << p.K << " V=" << p.V << " W=" << p.W << " tp=" << p.tp
    << " act=" << dtype_short(p.act) << " ssm=" << dtype_short(p.ssm_dtype) << " idx=" << dtype_short(p.index_dtype)
    << " cols=" << p.cols << " num_actual=" << p.num_actual << " rows=" << p.rows_alloc << " slots=" << p.num_slots
    << " reorder=" << p.reorder << " identity_ns=" << p.identity_ns << " identity_spec=" << p.identity_spec
    << " bias=" << p.has_bias << " null_block=" << (p.null_id ? std::to_string(*p.null_id) : "none")
    << " conv_layout=" << to_string(p.conv_layout) << " conv_rows=" << p.conv_rows() << "\n";
  for (const AttnSeq& q : p.seqs) {
    s << "  " << (q.spec ? "spec" : "non-spec") << " rows [";
    for (size_t i = 0; i < q.rows.size(); ++i) s << (i ? "," : "") << q.rows[i];
    s << "]";
    if (q.spec) {
      s << " slots [";
      for (size_t i = 0; i < q.cols.size(); ++i) s << (i ? "," : "") << q.cols[i];
      s << "] accepted " << q.nacc << "\n";
    } else {
      s << " slot " << q.slot << " init " << q.has_init << "\n";
    }
  }
  return s.str();
}

// Output buffers of a problem, pre-filled with a poison pattern.
inline void make_outputs(const AttnProblem& p, Buf* core, Buf* z, int poison_kind) {
  *core = Buf(p.act, {p.rows_alloc, p.HV, p.V});
  *z = Buf(p.act, {p.rows_alloc, p.HV, p.V});
  poison(*core, poison_kind);
  poison(*z, poison_kind);
}

}  // namespace gdn::prop
