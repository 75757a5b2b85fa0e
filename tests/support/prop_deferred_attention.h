// tests/support/prop_deferred_attention.h — gdn_attention's deferred-commit mode (docs/contract.md
// §7) for its tests: a hostile batch, one backend's pools and logs along a trajectory, a step on a
// backend, and the comparison of a device step with the CPU's (every output, what must stay
// untouched). Test code only.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "prop_attention.h"
#include "prop_deferred.h"

namespace gdn::prop {

// The hostile batch of the deferred mode's metadata tests: sequences 0 and 1 non-spec (0 without an
// initial state), 2..4 verify (4 without tokens) on shuffled rows, int64 metadata; the verify
// sequences' accepted counts, the non-spec replay counts, both groups' accepted paths (log_cols
// columns) and the token parents are garbage (negative, past the log, 2^40, or small values).
// p: a fresh problem; float32 activations and state, eight slots (5..7 named by no sequence), the
// pools filled with random values. Returns the four index tensors.
struct HostileIndex {
  Buf ns_replay, ns_path, sp_path, parents;
};
inline HostileIndex hostile_deferred_batch(AttnProblem& p, Rng& r, int64_t log_cols) {
  p.act = DType::kFloat32;
  p.ssm_dtype = DType::kFloat32;
  p.cols = 1;
  p.conv_layout = SpecConvLayout::kPerToken;
  p.conv_rows_extra = 0;
  p.num_slots = 8;
  alloc_params_and_pools(p, r);
  fill_normal(p.conv_pool, r, 1.0);
  fill_normal(p.ssm_pool, r, 0.3);
  const std::vector<int64_t> lens = {r.randint(1, 6), 1, r.randint(1, 5), r.randint(1, 5), 0};
  const int64_t rows = lens[0] + lens[1] + lens[2] + lens[3];
  const std::vector<int64_t> perm = random_perm(rows, r);
  auto garbage = [&]() -> int64_t {
    switch (r.randint(0, 4)) {
      case 0: return -1 - r.randint(0, 1000);
      case 1: return 1000000 + r.randint(0, 1000);
      case 2: return int64_t{1} << 40;
      default: return r.randint(-2, 4);
    }
  };
  int64_t next = 0;
  for (int64_t i = 0; i < 5; ++i) {
    AttnSeq s;
    for (int64_t t = 0; t < lens[i]; ++t) s.rows.push_back(perm[next++]);
    s.spec = i >= 2;
    if (s.spec) {
      s.cols = {i};
      s.nacc = garbage();
    } else {
      s.slot = i;
      s.has_init = i == 1;
    }
    p.seqs.push_back(s);
  }
  p.index_dtype = DType::kInt64;  // room for the huge values
  p.rows_alloc = p.num_actual = rows;
  build_meta(p);
  p.qkvz = Buf(p.act, {rows, p.qkvz_width()});
  p.ba = Buf(p.act, {rows, 2 * p.HV});
  fill_normal(p.qkvz, r, 1.0);
  fill_normal(p.ba, r, 1.0);
  std::vector<int64_t> ns_replay = {garbage(), garbage()}, parents(rows + 4);
  for (int64_t& v : parents) v = garbage();
  std::vector<std::vector<int64_t>> sp_path(3, std::vector<int64_t>(log_cols)), ns_path(2, std::vector<int64_t>(log_cols));
  for (auto* m : {&sp_path, &ns_path})
    for (auto& row : *m)
      for (int64_t& v : row) v = garbage();
  return HostileIndex{index_buf(ns_replay, DType::kInt64), index_buf2(ns_path, log_cols, DType::kInt64),
                      index_buf2(sp_path, log_cols, DType::kInt64), index_buf(parents, DType::kInt64)};
}

inline double out_tol(DType act, DType ssm) { return act == DType::kFloat32 && ssm == DType::kFloat32 ? 1e-5 : 1e-2; }

// One backend's memory along a trajectory: both pools, two recurrence logs and two conv logs (a
// step reads [cur] and writes [1 - cur]).
struct Side {
  Buf conv, ssm, rec[2], cvl[2];
};
// The pools of p, and logs of log_cols rows with padded slot strides: recurrence logs of plausible
// entries (unit keys, decays <= 0, beta in (0, 1)), conv logs of random inputs.
inline Side make_side(const AttnProblem& p, int64_t log_cols, Rng& r) {
  Side s{p.conv_pool, p.ssm_pool, {}, {}};
  const int64_t E = p.K + p.V + 2;
  for (int k = 0; k < 2; ++k) {
    s.rec[k] = Buf(DType::kFloat32, {p.num_slots, log_cols, p.HV, E}, log_cols * p.HV * E + 5);
    s.cvl[k] = Buf(p.act, {p.num_slots, log_cols, p.D()}, log_cols * p.D() + 3);
    fill_log(s.rec[k], p.K, r);
    fill_normal(s.cvl[k], r, 1.0);
  }
  return s;
}

// The deferred mode's optional tensors of a step (nullptr: absent).
struct Extra {
  Buf *ns_replay = nullptr, *ns_path = nullptr, *sp_path = nullptr, *parents = nullptr;
};
struct Out {
  Buf core, z;
};

// One deferred step of p on backend be with side's pools and logs (updated in place).
inline Status run_side(Backend be, AttnProblem& p, Side& s, int cur, const Extra& x, Out* o) {
  make_outputs(p, &o->core, &o->z, 0);
  GdnAttentionArgs a = attention_args(p, o->core, o->z);
  a.conv_state = s.conv.view();
  a.ssm_state = s.ssm.view();
  a.verify_log = s.rec[cur].view();
  a.verify_log_out = s.rec[1 - cur].view();
  a.conv_log = s.cvl[cur].view();
  a.conv_log_out = s.cvl[1 - cur].view();
  const bool ns = p.num_prefills + p.num_decodes > 0, sp = p.num_spec > 0;
  if (x.ns_replay && ns) a.non_spec_num_accepted_tokens = x.ns_replay->view();
  if (x.ns_path && ns) a.non_spec_accepted_path = x.ns_path->view();
  if (x.sp_path && sp) a.spec_accepted_path = x.sp_path->view();
  if (x.parents && sp) a.spec_token_parents = x.parents->view();
  return capture::run_on(be, a);
}

inline int64_t slot_of(const AttnSeq& s) { return s.spec ? s.cols[0] : s.slot; }
// docs/contract.md §3: an unusable slot or a token outside [0, num_actual_tokens).
inline bool is_padding(const AttnProblem& p, const AttnSeq& s) {
  const int64_t slot = slot_of(s);
  if (slot < 0 || slot >= p.num_slots || (p.null_id && slot == *p.null_id)) return true;
  for (int64_t row : s.rows)
    if (row < 0 || row >= p.num_actual) return true;
  return false;
}
// The recurrence-log entries [slot, row] the step writes: the first min(T, log_cols) rows of each
// verify sequence that is not padding.
inline std::vector<std::vector<bool>> written_entries(const AttnProblem& p, int64_t log_cols) {
  std::vector<std::vector<bool>> w(p.num_slots, std::vector<bool>(log_cols, false));
  for (const AttnSeq& s : p.seqs)
    if (s.spec && !is_padding(p, s))
      for (int64_t t = 0; t < std::min<int64_t>(static_cast<int64_t>(s.rows.size()), log_cols); ++t)
        w[s.cols[0]][t] = true;
  return w;
}
// The elements of a's stride gaps that differ from b's ("" if none).
inline std::string gap_diff(const Buf& a, const Buf& b) {
  for (int64_t q = 0; q < a.phys_elems(); ++q)
    if (!a.is_logical(q) && a.bits_phys(q) != b.bits_phys(q)) return "stride gap element " + std::to_string(q);
  return "";
}

// A device step (g, og; g0: the device side before it, cur: the logs it read) against the CPU's (c, oc):
// core_attn_out rows < num_actual_tokens and the SSM state of named slots within out_tol, the written
// recurrence-log entries within 1e-5 (float32 activations) or 1e-2; z, the conv pool and conv_log_out
// equal to the CPU's bit for bit; rows >= num_actual_tokens, unnamed slots, the read logs, the
// unwritten log entries and stride gaps untouched; padded sequences' rows of core_attn_out zero.
inline void expect_match(const AttnProblem& p, const Side& g, const Side& g0, const Side& c, const Out& og,
                         const Out& oc, int cur) {
  const int out = 1 - cur;
  const double tol = out_tol(p.act, p.ssm_dtype), log_tol = p.act == DType::kFloat32 ? 1e-5 : 1e-2;
  const int64_t row = p.HV * p.V, n = p.num_actual * row;
  EXPECT_LE(rel_l2(og.core, oc.core, {{0, n}}, {{0, n}}), tol) << "core_attn_out vs the CPU";
  EXPECT_EQ(bit_diff(og.core, n, oc.core, n, og.core.numel() - n), "") << "core_attn_out rows >= num_actual_tokens";
  std::vector<bool> named(p.num_slots, false);
  for (const AttnSeq& s : p.seqs) {
    if (!is_padding(p, s)) named[slot_of(s)] = true;
    else
      for (int64_t t : s.rows)
        for (int64_t e = 0; t >= 0 && t < p.num_actual && e < row; ++e)
          if (og.core.get(t * row + e) != 0.0) {
            ADD_FAILURE() << "padding sequence's core_attn_out row " << t << " is not zero";
            break;
          }
  }
  EXPECT_EQ(byte_diff(og.z, oc.z), "") << "z";
  EXPECT_EQ(byte_diff(g.conv, c.conv), "") << "conv_state vs the CPU";
  for (int64_t s = 0; s < p.num_slots; ++s)
    expect_slot_close(g.ssm, s, c.ssm, s, named[s] ? tol : 0.0, named[s] ? "ssm_state" : "ssm_state, unnamed slot");
  EXPECT_EQ(gap_diff(g.ssm, c.ssm), "") << "ssm_state";
  EXPECT_EQ(byte_diff(g.cvl[out], c.cvl[out]), "") << "conv_log_out vs the CPU";
  EXPECT_EQ(byte_diff(g.cvl[cur], g0.cvl[cur]), "") << "conv_log (read only)";
  EXPECT_EQ(byte_diff(g.rec[cur], g0.rec[cur]), "") << "verify_log (read only)";
  expect_logs(g.rec[out], c.rec[out], g0.rec[out], written_entries(p, g.rec[out].dim(1)), log_tol, "verify_log_out");
  EXPECT_EQ(gap_diff(g.rec[out], g0.rec[out]), "") << "verify_log_out";
}

}  // namespace gdn::prop
