// Property 7 for gdn_attention: hostile device-side metadata inside a mixed batch. Each hostile
// call is compared bit for bit (same backend) with a clean call the rules declare equivalent:
//   non-spec slot >= num_slots, verify column 0 >= num_slots          == slot -1 (padding);
//   verify column a-1 >= num_slots                                     == whole row -1 (padding);
//   verify column t != a-1 >= num_slots                                == column t = -1 (store skipped);
//   num_accepted_tokens 0 / negative / > cols                          == clamped into [1, cols];
//   a token whose remap index is past the buffer, negative, or in the graph-padded rows
//   [num_actual_tokens, rows)                                          == its sequence padding without that token;
//   query_start_loc[n] past the token_indx length (or num_actual_tokens without remapping)
//                                                                      == the group's last sequence padding.
// T > cols in the spec group is compared with the composition of primitives under the same
// metadata (bit-exact on the CPU, rel L2 on CUDA as in property 3).
// check_metadata must report each hostile call and accept each clean one.
#include "prop_attention.h"

namespace gdn::prop {
namespace {

// Both verify conv layouts: the clean equivalents are the same in each (an unusable column a-1 makes
// the sequence padding, an unusable column t >= 1 skips its stores).
class PropHostileAttention : public ::testing::TestWithParam<std::tuple<Backend, SpecConvLayout>> {};

AttnProblem make_base(Rng& r, SpecConvLayout layout, bool spec_only_identity = false,
                      bool nonspec_only_identity = false) {
  AttnProblem p;
  p.conv_layout = layout;
  p.act = DType::kBFloat16;
  p.ssm_dtype = DType::kFloat32;
  p.cols = 3;
  MixOptions m;
  m.n_pad_ns = 0;
  m.n_pad_spec = 0;
  if (nonspec_only_identity) { m.n_spec = 0; m.interleave = false; p.identity_ns = true; }
  if (spec_only_identity) { m.n_prefill = m.n_decode = 0; m.interleave = false; p.identity_spec = true; m.n_spec = 4; }
  make_mixed_batch(p, r, m);
  return p;
}

// Index of the first sequence matching pred, or -1.
template <typename Pred>
int find_seq(const AttnProblem& p, Pred pred) {
  for (size_t i = 0; i < p.seqs.size(); ++i)
    if (pred(p.seqs[i])) return static_cast<int>(i);
  return -1;
}

struct AMutation {
  const char* name;
  int base_kind;  // 0 mixed, 1 spec-only identity, 2 non-spec-only identity
  // Returns false when the base has no sequence to mutate.
  std::function<bool(AttnProblem& hostile, AttnProblem& clean)> apply;
  std::function<void(AttnProblem& hostile)> after_meta;  // edits of the built metadata, or null
};

// Adds a token with global row `bad` to sequence i of `h` (at position pos) and turns sequence i of
// `c` into padding.
bool add_bad_token(AttnProblem& h, AttnProblem& c, int i, int64_t bad, size_t pos) {
  if (i < 0) return false;
  AttnSeq& s = h.seqs[i];
  s.rows.insert(s.rows.begin() + std::min(pos, s.rows.size()), bad);
  if (c.seqs[i].spec) for (auto& v : c.seqs[i].cols) v = -1;
  else c.seqs[i].slot = -1;
  return true;
}

// Makes the last k sequences of group `spec` of `c` padding (false when the group has fewer).
bool pad_last(AttnProblem& c, bool spec, int k = 1) {
  for (size_t i = c.seqs.size(); i-- > 0 && k > 0;) {
    AttnSeq& s = c.seqs[i];
    if (s.spec != spec) continue;
    if (spec) for (auto& v : s.cols) v = -1;
    else s.slot = -1;
    --k;
  }
  return k == 0;
}

std::vector<AMutation> amutations() {
  auto prefill = [](const AttnSeq& s) { return !s.spec && s.rows.size() >= 2; };
  auto spec_short = [](const AttnSeq& s) { return s.spec && static_cast<int64_t>(s.rows.size()) < 3; };
  std::vector<AMutation> m;
  m.push_back({"non-spec slot == num_slots", 0, [=](AttnProblem& h, AttnProblem& c) {
                 int i = find_seq(h, prefill);
                 if (i < 0) return false;
                 h.seqs[i].slot = h.num_slots;
                 c.seqs[i].slot = -1;
                 return true;
               }, nullptr});
  m.push_back({"non-spec slot far past the pool", 0, [](AttnProblem& h, AttnProblem& c) {
                 int i = find_seq(h, [](const AttnSeq& s) { return !s.spec && s.rows.size() == 1; });
                 if (i < 0) return false;
                 h.seqs[i].slot = h.num_slots + 100000;
                 c.seqs[i].slot = -1;
                 return true;
               }, nullptr});
  m.push_back({"verify column 0 == num_slots", 0, [](AttnProblem& h, AttnProblem& c) {
                 int i = find_seq(h, [](const AttnSeq& s) { return s.spec; });
                 if (i < 0) return false;
                 h.seqs[i].cols[0] = h.num_slots;
                 c.seqs[i].cols[0] = -1;
                 return true;
               }, nullptr});
  m.push_back({"verify column a-1 past the pool", 0, [](AttnProblem& h, AttnProblem& c) {
                 int i = find_seq(h, [](const AttnSeq& s) { return s.spec; });
                 if (i < 0) return false;
                 h.seqs[i].nacc = c.seqs[i].nacc = 2;
                 h.seqs[i].cols[1] = h.num_slots + 1;
                 for (auto& v : c.seqs[i].cols) v = -1;
                 return true;
               }, nullptr});
  m.push_back({"verify column t != a-1 past the pool", 0, [](AttnProblem& h, AttnProblem& c) {
                 int i = find_seq(h, [](const AttnSeq& s) { return s.spec && s.rows.size() >= 2; });
                 if (i < 0) return false;
                 h.seqs[i].nacc = c.seqs[i].nacc = 1;
                 h.seqs[i].cols[1] = h.num_slots + 7;
                 c.seqs[i].cols[1] = -1;
                 return true;
               }, nullptr});
  m.push_back({"num_accepted_tokens 0 / negative / > cols", 0, [](AttnProblem& h, AttnProblem& c) {
                 int k = 0;
                 for (size_t i = 0; i < h.seqs.size(); ++i) {
                   if (!h.seqs[i].spec) continue;
                   const int64_t hv[] = {0, -3, h.cols + 5}, cv[] = {1, 1, h.cols};
                   h.seqs[i].nacc = hv[k % 3];
                   c.seqs[i].nacc = cv[k % 3];
                   ++k;
                 }
                 return k > 0;
               }, nullptr});
  m.push_back({"non-spec remap index past the buffer", 0, [=](AttnProblem& h, AttnProblem& c) {
                 return add_bad_token(h, c, find_seq(h, prefill), h.rows_alloc + 1000, 1);
               }, nullptr});
  m.push_back({"non-spec remap index negative", 0, [=](AttnProblem& h, AttnProblem& c) {
                 return add_bad_token(h, c, find_seq(h, prefill), -1, 0);
               }, nullptr});
  m.push_back({"non-spec remap index in the graph-padded rows", 0, [=](AttnProblem& h, AttnProblem& c) {
                 return add_bad_token(h, c, find_seq(h, prefill), h.num_actual, 100);
               }, nullptr});
  m.push_back({"spec remap index past the buffer", 0, [=](AttnProblem& h, AttnProblem& c) {
                 return add_bad_token(h, c, find_seq(h, spec_short), h.rows_alloc + 5, 0);
               }, nullptr});
  m.push_back({"spec remap index == num_actual_tokens", 0, [=](AttnProblem& h, AttnProblem& c) {
                 return add_bad_token(h, c, find_seq(h, spec_short), h.num_actual, 100);
               }, nullptr});
  m.push_back({"spec_query_start_loc[n] past the token_indx length", 0,
               [](AttnProblem&, AttnProblem& c) { return pad_last(c, true); },
               [](AttnProblem& h) { h.sp_qsl.seti(h.num_spec, h.sp_indx.numel() + 7); }});
  m.push_back({"non_spec_query_start_loc[n] past the token_indx length", 0,
               [](AttnProblem&, AttnProblem& c) { return pad_last(c, false); },
               [](AttnProblem& h) {
                 int64_t n = h.num_prefills + h.num_decodes;
                 h.ns_qsl.seti(n, h.ns_indx.numel() + 3);
               }});
  m.push_back({"spec_query_start_loc[n] past num_actual_tokens (no remapping)", 1,
               [](AttnProblem&, AttnProblem& c) { return pad_last(c, true); },
               [](AttnProblem& h) { h.sp_qsl.seti(h.num_spec, h.num_actual + 4); }});
  m.push_back({"non_spec_query_start_loc[n] past num_actual_tokens (no remapping)", 2,
               [](AttnProblem&, AttnProblem& c) { return pad_last(c, false); },
               [](AttnProblem& h) {
                 int64_t n = h.num_prefills + h.num_decodes;
                 h.ns_qsl.seti(n, h.num_actual + 9);
               }});
  // The last sequence lies wholly past the tokens; the one before it runs past them.
  m.push_back({"non_spec_query_start_loc[n-1..n] past num_actual_tokens (no remapping)", 2,
               [](AttnProblem&, AttnProblem& c) { return pad_last(c, false, 2); },
               [](AttnProblem& h) {
                 int64_t n = h.num_prefills + h.num_decodes;
                 h.ns_qsl.seti(n - 1, h.num_actual + 2);
                 h.ns_qsl.seti(n, h.num_actual + 5);
               }});
  return m;
}

TEST_P(PropHostileAttention, ClampOrPad) {
  const Backend be = std::get<0>(GetParam());
  const SpecConvLayout layout = std::get<1>(GetParam());
  PROP_SKIP_IF_UNAVAILABLE(be);
  uint64_t seed = 900;
  for (const AMutation& mu : amutations()) {
    // Draw batches until one has a sequence this mutation applies to (deterministic).
    AttnProblem hostile, clean;
    bool applied = false;
    for (int tries = 0; tries < 20 && !applied; ++tries) {
      Rng r(seed++);
      AttnProblem base = make_base(r, layout, mu.base_kind == 1, mu.base_kind == 2);
      hostile = base;
      clean = base;
      applied = mu.apply(hostile, clean);
    }
    if (!applied) {
      ADD_FAILURE() << "test setup: no sequence to mutate for '" << mu.name << "'";
      continue;
    }
    Rng rd(seed * 7);
    fill_attention_data(hostile, rd);
    // The clean problem shares every tensor; only its metadata differs.
    clean.qkvz = hostile.qkvz; clean.ba = hostile.ba; clean.weight = hostile.weight; clean.bias = hostile.bias;
    clean.A_log = hostile.A_log; clean.dt_bias = hostile.dt_bias; clean.conv_pool = hostile.conv_pool;
    clean.ssm_pool = hostile.ssm_pool;
    build_meta(clean);
    if (mu.after_meta) mu.after_meta(hostile);
    SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(be) << " case '" << mu.name
                                      << "'\nhostile: " << describe(hostile) << "clean: " << describe(clean));
    Buf core_h, z_h, core_c, z_c;
    make_outputs(hostile, &core_h, &z_h, 0);
    make_outputs(clean, &core_c, &z_c, 0);
    Status meta_h = check_metadata(attention_args(hostile, core_h, z_h));
    Status meta_c = check_metadata(attention_args(clean, core_c, z_c));
    EXPECT_FALSE(meta_h.ok()) << "check_metadata accepts the hostile call";
    EXPECT_TRUE(meta_c.ok()) << "check_metadata rejects the clean call: " << meta_c.message();
    PROP_ASSERT_OK(run_attention(be, hostile, core_h, z_h));
    PROP_ASSERT_OK(run_attention(be, clean, core_c, z_c));
    EXPECT_EQ(byte_diff(core_h, core_c), "") << "core_attn_out differs from the clean equivalent";
    EXPECT_EQ(byte_diff(z_h, z_c), "") << "z differs from the clean equivalent";
    EXPECT_EQ(byte_diff(hostile.conv_pool, clean.conv_pool), "") << "conv_state differs from the clean equivalent";
    EXPECT_EQ(byte_diff(hostile.ssm_pool, clean.ssm_pool), "") << "ssm_state differs from the clean equivalent";
    for (const Buf* b : {&core_h, &z_h, &hostile.conv_pool, &hostile.ssm_pool, &hostile.qkvz})
      EXPECT_TRUE(b->canaries_ok()) << "write outside a buffer";
  }
}

// T > cols inside gdn_attention: the same as the composition of primitives (whose T > cols
// behaviour test_prop_hostile.cpp pins down).
TEST_P(PropHostileAttention, TokensPastColsMatchComposition) {
  const Backend be = std::get<0>(GetParam());
  PROP_SKIP_IF_UNAVAILABLE(be);
  Rng r(950);
  AttnProblem p = make_base(r, std::get<1>(GetParam()));
  int i = find_seq(p, [](const AttnSeq& s) { return s.spec; });
  ASSERT_GE(i, 0);
  // Two extra tokens at new rows below num_actual_tokens: T = old T + 2, forced past cols.
  AttnSeq& s = p.seqs[i];
  while (static_cast<int64_t>(s.rows.size()) <= p.cols) {
    for (AttnSeq& o : p.seqs)  // shift every row >= 0 up by one to make room at row 0
      for (int64_t& row : o.rows) ++row;
    s.rows.push_back(0);
    ++p.num_actual;
    ++p.rows_alloc;
  }
  s.nacc = 2;
  fill_attention_data(p, r);
  SCOPED_TRACE(::testing::Message() << "backend=" << capture::backend_name(be) << " " << describe(p));
  AttnProblem fused = p, composed = p;
  Buf core_f, z_f, core_c, z_c;
  make_outputs(p, &core_f, &z_f, 0);
  make_outputs(p, &core_c, &z_c, 0);
  EXPECT_FALSE(check_metadata(attention_args(fused, core_f, z_f)).ok()) << "check_metadata accepts T > cols";
  PROP_ASSERT_OK(run_attention(be, fused, core_f, z_f));
  PROP_ASSERT_OK(compose_attention(be, composed, core_c, z_c));
  const int64_t row = p.HV * p.V;
  if (be == Backend::kCPU) {
    EXPECT_EQ(byte_diff(core_f, core_c), "") << "core_attn_out: fused vs composition";
    EXPECT_EQ(byte_diff(fused.ssm_pool, composed.ssm_pool), "") << "ssm_state: fused vs composition";
  } else {
    EXPECT_LE(rel_l2(core_f, core_c, {{0, p.num_actual * row}}, {{0, p.num_actual * row}}), tol_for(p.act));
    EXPECT_LE(rel_l2(fused.ssm_pool, composed.ssm_pool), tol_for(p.ssm_dtype));
  }
  EXPECT_EQ(byte_diff(z_f, z_c), "") << "z: fused vs composition";
  EXPECT_EQ(byte_diff(fused.conv_pool, composed.conv_pool), "") << "conv_state: fused vs composition";
  for (const Buf* b : {&core_f, &z_f, &fused.conv_pool, &fused.ssm_pool}) EXPECT_TRUE(b->canaries_ok());
}

INSTANTIATE_TEST_SUITE_P(
    Prop, PropHostileAttention,
    ::testing::Combine(::testing::ValuesIn(capture::test_backends(capture::Ops::kAttention)),
                       ::testing::Values(SpecConvLayout::kRolling, SpecConvLayout::kPerToken)),
    [](const ::testing::TestParamInfo<std::tuple<Backend, SpecConvLayout>>& i) {
      return std::string(capture::backend_name(std::get<0>(i.param))) + "_" + to_string(std::get<1>(i.param));
    });

}  // namespace
}  // namespace gdn::prop
